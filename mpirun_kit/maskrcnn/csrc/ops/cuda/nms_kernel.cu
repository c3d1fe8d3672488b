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
    const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs, double iou_threshold, int64_t max_keep) {
  check_nms_inputs(boxes, scores);
  check_rows(idxs, "idxs", boxes.size(0), "boxes");
  check_same_device(boxes, "boxes", idxs, "idxs");
  TORCH_CHECK(!idxs.is_floating_point(), "idxs must be an integer tensor (a group id per box), got dtype ", idxs.scalar_type());
  TORCH_CHECK(max_keep >= -1, "max_keep must be >= 0 (how many kept boxes to return), or -1 for all; got ", max_keep);
  const c10::cuda::CUDAGuard guard(boxes.device());
  auto keep = cuda::nms_indices(boxes, scores, idxs.to(at::kLong), iou_threshold);
  // the first max_keep of the kept boxes (the bitmask pass has already run over all of them)
  return max_keep >= 0 && max_keep < keep.size(0) ? keep.slice(0, 0, max_keep) : keep;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("nms", TORCH_FN(nms_kernel));
  m.impl("batched_nms", TORCH_FN(batched_nms_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
