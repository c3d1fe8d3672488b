// CUDA kernels of nms and batched_nms (schemas: ../nms.cpp; algorithm: nms_impl.cuh).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "../checks.h"
#include "cuda_utils.cuh"
#include "nms_impl.cuh"

namespace mpirun_kit {
namespace ops {
namespace {

void check_nms_inputs(const at::Tensor& boxes, const at::Tensor& scores) {
  check_boxes(boxes, "boxes");
  check_rows(scores, "scores", boxes.size(0), "boxes");
  check_same_dtype(boxes, "boxes", scores, "scores");
  check_same_device(boxes, "boxes", scores, "scores");
  check_cuda_dtype(boxes, "boxes");
}

at::Tensor nms_kernel(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  check_nms_inputs(boxes, scores);
  const c10::cuda::CUDAGuard guard(boxes.device());
  return cuda::nms_indices(boxes, scores, at::Tensor(), iou_threshold);
}

at::Tensor batched_nms_kernel(
    const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs, double iou_threshold) {
  check_nms_inputs(boxes, scores);
  check_rows(idxs, "idxs", boxes.size(0), "boxes");
  check_same_device(boxes, "boxes", idxs, "idxs");
  TORCH_CHECK(!idxs.is_floating_point(), "idxs must be an integer tensor (a group id per box), got dtype ", idxs.scalar_type());
  const c10::cuda::CUDAGuard guard(boxes.device());
  return cuda::nms_indices(boxes, scores, idxs.to(at::kLong), iou_threshold);
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("nms", TORCH_FN(nms_kernel));
  m.impl("batched_nms", TORCH_FN(batched_nms_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
