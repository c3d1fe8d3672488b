// Schema of grid_anchors: shifts [A, 4] cell anchors over an H x W grid
// (kernels: cpu/anchors_kernel.cpp, cuda/anchors_kernel.cu).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  m.def("grid_anchors(Tensor cell_anchors, SymInt height, SymInt width, int stride) -> Tensor");
}
