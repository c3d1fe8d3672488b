// CUDA kernel of box_iou (schema: ../box_iou.cpp): one thread per (i, j) pair,
// computed in opmath precision (float for half/bfloat16).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "../box_math.h"
#include "../checks.h"
#include "cuda_utils.cuh"

namespace mpirun_kit {
namespace ops {
namespace {

template <typename T>
__global__ void box_iou_cuda(int64_t n, int64_t m, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out) {
  using acc_t = at::opmath_type<T>;
  MRK_CUDA_1D_LOOP(idx, n * m) {
    const int64_t i = idx / m, j = idx % m;
    const T* p = a + 4 * i;
    const T* q = b + 4 * j;
    const acc_t px1 = p[0], py1 = p[1], px2 = p[2], py2 = p[3];
    const acc_t qx1 = q[0], qy1 = q[1], qx2 = q[2], qy2 = q[3];
    out[idx] = static_cast<T>(
        iou(px1, py1, px2, py2, (px2 - px1) * (py2 - py1), qx1, qy1, qx2, qy2, (qx2 - qx1) * (qy2 - qy1)));
  }
}

at::Tensor box_iou_kernel(const at::Tensor& a_in, const at::Tensor& b_in) {
  check_boxes(a_in, "a");
  check_boxes(b_in, "b");
  check_same_dtype(a_in, "a", b_in, "b");
  check_same_device(a_in, "a", b_in, "b");
  check_cuda_dtype(a_in, "a");
  const c10::cuda::CUDAGuard guard(a_in.device());
  const auto a = a_in.contiguous();
  const auto b = b_in.contiguous();
  const int64_t n = a.size(0), m = b.size(0);
  auto out = at::empty({n, m}, a.options());
  if (n * m == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "mpirun_kit::box_iou_cuda", [&] {
    box_iou_cuda<scalar_t><<<cuda::blocks_for(n * m), cuda::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        n, m, a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("box_iou", TORCH_FN(box_iou_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
