// Schema of the fused RPN proposal step (kernels: cpu/proposals_kernel.cpp,
// cuda/proposals_kernel.cu).  Outputs are concatenated over the batch:
// boxes [P, 4], scores [P], counts [B] (proposals per image, in image order).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  m.def(
      "generate_proposals(Tensor anchors, Tensor objectness, Tensor deltas, Tensor image_sizes, Tensor? levels, "
      "int pre_nms_top_n, int post_nms_top_n, float nms_thresh, float min_size, float[] weights, "
      "float clip_value) -> (Tensor, Tensor, Tensor)");
}
