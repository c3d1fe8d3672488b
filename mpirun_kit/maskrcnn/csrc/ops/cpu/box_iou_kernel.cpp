// CPU kernel of box_iou (schema: ../box_iou.cpp): rows of the [N, M] result in parallel.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../box_math.h"
#include "../checks.h"

namespace mpirun_kit {
namespace ops {
namespace {

at::Tensor box_iou_kernel(const at::Tensor& a_in, const at::Tensor& b_in) {
  check_boxes(a_in, "a");
  check_boxes(b_in, "b");
  check_same_dtype(a_in, "a", b_in, "b");
  check_cpu_dtype(a_in, "a");
  const auto a = a_in.contiguous();
  const auto b = b_in.contiguous();
  const int64_t n = a.size(0), m = b.size(0);
  auto out = at::empty({n, m}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "mpirun_kit::box_iou_cpu", [&] {
    const scalar_t* pa = a.data_ptr<scalar_t>();
    const scalar_t* pb = b.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    // b as structure-of-arrays, so the inner loop over b is contiguous and vectorises.
    std::vector<scalar_t> bx1(m), by1(m), bx2(m), by2(m), area_b(m);
    for (int64_t j = 0; j < m; ++j) {
      const scalar_t* q = pb + 4 * j;
      bx1[j] = q[0];
      by1[j] = q[1];
      bx2[j] = q[2];
      by2[j] = q[3];
      area_b[j] = (q[2] - q[0]) * (q[3] - q[1]);
    }
    const scalar_t* qx1 = bx1.data();
    const scalar_t* qy1 = by1.data();
    const scalar_t* qx2 = bx2.data();
    const scalar_t* qy2 = by2.data();
    const scalar_t* qa = area_b.data();
    at::parallel_for(0, n, std::max<int64_t>(1, 4096 / std::max<int64_t>(m, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const scalar_t* p = pa + 4 * i;
        const scalar_t px1 = p[0], py1 = p[1], px2 = p[2], py2 = p[3];
        const scalar_t ar = (px2 - px1) * (py2 - py1);
        scalar_t* row = po + i * m;
        for (int64_t j = 0; j < m; ++j) {
          row[j] = iou(px1, py1, px2, py2, ar, qx1[j], qy1[j], qx2[j], qy2[j], qa[j]);
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CPU, m) {
  m.impl("box_iou", TORCH_FN(box_iou_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
