// Schema of box_iou (kernels: cpu/box_iou_kernel.cpp, cuda/box_iou_kernel.cu).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  m.def("box_iou(Tensor a, Tensor b) -> Tensor");
}
