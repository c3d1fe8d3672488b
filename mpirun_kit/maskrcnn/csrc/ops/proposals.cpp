// Schema of the fused RPN proposal step (kernels: cpu/proposals_kernel.cpp,
// cuda/proposals_kernel.cu).  generate_proposals: outputs concatenated over the
// batch, boxes [P, 4], scores [P], counts [B] (proposals per image, in image
// order); P depends on the data, so the CUDA kernel must wait for the device to
// size it.  generate_proposals_padded (the training step's): fixed-size outputs,
// boxes [B, post, 4], scores [B, post] (image b's proposals in its first
// counts[b] rows, zeros after), counts [B]; the anchors' levels come as host
// sizes (level_sizes: anchors per level, in order; [] = one level), so the CUDA
// kernel never reads a device value on the host.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  m.def(
      "generate_proposals(Tensor anchors, Tensor objectness, Tensor deltas, Tensor image_sizes, Tensor? levels, "
      "int pre_nms_top_n, int post_nms_top_n, float nms_thresh, float min_size, float[] weights, "
      "float clip_value) -> (Tensor, Tensor, Tensor)");
  m.def(
      "generate_proposals_padded(Tensor anchors, Tensor objectness, Tensor deltas, Tensor image_sizes, "
      "int[] level_sizes, int pre_nms_top_n, int post_nms_top_n, float nms_thresh, float min_size, float[] weights, "
      "float clip_value) -> (Tensor, Tensor, Tensor)");
}
