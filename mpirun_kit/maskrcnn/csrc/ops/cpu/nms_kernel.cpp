// CPU kernels of nms and batched_nms (schemas: ../nms.cpp; algorithm: nms_impl.h).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <numeric>

#include "../checks.h"
#include "nms_impl.h"

namespace mpirun_kit {
namespace ops {
namespace {

void check_nms_inputs(const at::Tensor& boxes, const at::Tensor& scores) {
  check_boxes(boxes, "boxes");
  check_rows(scores, "scores", boxes.size(0), "boxes");
  check_same_dtype(boxes, "boxes", scores, "scores");
  check_cpu_dtype(boxes, "boxes");
}

at::Tensor run(
    const at::Tensor& boxes_in, const at::Tensor& scores_in, const at::Tensor* idxs_in, double thr, int64_t max_keep) {
  const auto boxes = boxes_in.contiguous();
  const auto scores = scores_in.contiguous();
  at::Tensor idxs;
  if (idxs_in != nullptr) {
    idxs = idxs_in->to(at::kLong).contiguous();
  }
  const int64_t n = boxes.size(0);
  std::vector<int64_t> kept;
  AT_DISPATCH_FLOATING_TYPES(boxes.scalar_type(), "mpirun_kit::nms_cpu", [&] {
    std::vector<int64_t> rows(n);
    std::iota(rows.begin(), rows.end(), 0);
    const int64_t* groups = idxs_in != nullptr ? idxs.data_ptr<int64_t>() : nullptr;
    if (max_keep >= 0 && max_keep < n) {
      kept = cpu::nms_rows_top<scalar_t>(
          boxes.data_ptr<scalar_t>(), scores.data_ptr<scalar_t>(), groups, rows, static_cast<scalar_t>(thr), max_keep);
    } else {
      kept = cpu::nms_rows<scalar_t>(
          boxes.data_ptr<scalar_t>(), scores.data_ptr<scalar_t>(), groups, rows, static_cast<scalar_t>(thr));
    }
  });
  auto out = at::empty({static_cast<int64_t>(kept.size())}, boxes.options().dtype(at::kLong));
  std::copy(kept.begin(), kept.end(), out.data_ptr<int64_t>());
  return out;
}

at::Tensor nms_kernel(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  check_nms_inputs(boxes, scores);
  return run(boxes, scores, nullptr, iou_threshold, -1);
}

at::Tensor batched_nms_kernel(
    const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& idxs, double iou_threshold, int64_t max_keep) {
  check_nms_inputs(boxes, scores);
  check_rows(idxs, "idxs", boxes.size(0), "boxes");
  TORCH_CHECK(!idxs.is_floating_point(), "idxs must be an integer tensor (a group id per box), got dtype ", idxs.scalar_type());
  TORCH_CHECK(max_keep >= -1, "max_keep must be >= 0 (how many kept boxes to return), or -1 for all; got ", max_keep);
  return run(boxes, scores, &idxs, iou_threshold, max_keep);
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CPU, m) {
  m.impl("nms", TORCH_FN(nms_kernel));
  m.impl("batched_nms", TORCH_FN(batched_nms_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
