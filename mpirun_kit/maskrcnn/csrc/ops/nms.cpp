// Schemas of nms and batched_nms (kernels: cpu/nms_kernel.cpp, cuda/nms_kernel.cu).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  // Kept indices, sorted by decreasing score (ties: lower index first).
  m.def("nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor");
  // NMS per group id in idxs, all groups in one call; max_keep >= 0 keeps only the first
  // max_keep of them (the same boxes, found without running NMS over every box).
  m.def("batched_nms(Tensor boxes, Tensor scores, Tensor idxs, float iou_threshold, int max_keep=-1) -> Tensor");
}
