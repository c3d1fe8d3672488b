// Schemas of nms and batched_nms (kernels: cpu/nms_kernel.cpp, cuda/nms_kernel.cu).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  // Kept indices, sorted by decreasing score (ties: lower index first).
  m.def("nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor");
  // NMS per group id in idxs, all groups in one call.
  m.def("batched_nms(Tensor boxes, Tensor scores, Tensor idxs, float iou_threshold) -> Tensor");
}
