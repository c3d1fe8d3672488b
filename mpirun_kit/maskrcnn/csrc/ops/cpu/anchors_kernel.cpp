// CPU kernel of grid_anchors (schema: ../anchors.cpp): out[(y*W + x)*A + a] =
// cell[a] + (x*stride, y*stride, x*stride, y*stride), torchvision's order.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../checks.h"

namespace mpirun_kit {
namespace ops {
namespace {

at::Tensor grid_anchors_kernel(const at::Tensor& cell_in, int64_t height, int64_t width, int64_t stride) {
  check_boxes(cell_in, "cell_anchors");
  check_cpu_dtype(cell_in, "cell_anchors");
  TORCH_CHECK(height >= 0 && width >= 0, "feature size must be >= 0, got height ", height, ", width ", width);
  TORCH_CHECK(stride > 0, "stride must be > 0, got ", stride);
  const auto cell = cell_in.contiguous();
  const int64_t a = cell.size(0);
  auto out = at::empty({height * width * a, 4}, cell.options());
  AT_DISPATCH_FLOATING_TYPES(cell.scalar_type(), "mpirun_kit::grid_anchors_cpu", [&] {
    const scalar_t* pc = cell.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    const scalar_t s = static_cast<scalar_t>(stride);
    at::parallel_for(0, height, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t y = lo; y < hi; ++y) {
        const scalar_t sy = static_cast<scalar_t>(y) * s;
        for (int64_t x = 0; x < width; ++x) {
          const scalar_t sx = static_cast<scalar_t>(x) * s;
          scalar_t* o = po + ((y * width + x) * a) * 4;
          for (int64_t i = 0; i < a; ++i) {
            o[4 * i + 0] = sx + pc[4 * i + 0];
            o[4 * i + 1] = sy + pc[4 * i + 1];
            o[4 * i + 2] = sx + pc[4 * i + 2];
            o[4 * i + 3] = sy + pc[4 * i + 3];
          }
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CPU, m) {
  m.impl("grid_anchors", TORCH_FN(grid_anchors_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
