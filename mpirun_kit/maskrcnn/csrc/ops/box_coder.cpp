// Schemas of the box coder (kernels: cpu/box_coder_kernel.cpp, cuda/box_coder_kernel.cu).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  m.def("encode_boxes(Tensor reference_boxes, Tensor proposals, float[] weights) -> Tensor");
  m.def("decode_boxes(Tensor deltas, Tensor boxes, float[] weights, float clip_value) -> Tensor");
}
