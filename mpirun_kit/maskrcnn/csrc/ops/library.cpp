// The mpirun_kit op library: the one TORCH_LIBRARY block.
//
// Every op's schema lives in its own file (nms.cpp, roi_align.cpp, ...) as a
// TORCH_LIBRARY_FRAGMENT; kernels are registered per dispatch key in
// cpu/, cuda/ and autograd/.  Python loads the built _C*.so with
// torch.ops.load_library (mpirun_kit/maskrcnn/ops/_loader.py).
#include <torch/library.h>

TORCH_LIBRARY(mpirun_kit, m) {
  // Intentionally empty: schemas are defined in the per-op fragments.
}
