// Schemas of roi_align and its backward, which is an op of its own so that the
// Autograd kernel (autograd/roi_align_kernel.cpp) can call it through the
// dispatcher on any device.  Kernels: cpu/roi_align_kernel.cpp, cuda/roi_align_kernel.cu.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  m.def(
      "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
      "int sampling_ratio, bool aligned) -> Tensor");
  m.def(
      "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
      "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
      "int sampling_ratio, bool aligned) -> Tensor");
}
