// CUDA kernel of grid_anchors (schema: ../anchors.cpp): one thread per output
// coordinate, same layout as the CPU kernel ((y*W + x)*A + a, 4).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "../checks.h"
#include "cuda_utils.cuh"

namespace mpirun_kit {
namespace ops {
namespace {

template <typename T>
__global__ void grid_anchors_cuda(int64_t total, int64_t width, int64_t a, int64_t stride, const T* __restrict__ cell, T* __restrict__ out) {
  using acc_t = at::opmath_type<T>;
  MRK_CUDA_1D_LOOP(idx, total) {
    const int64_t coord = idx % 4;
    const int64_t anchor = (idx / 4) % a;
    const int64_t loc = idx / 4 / a;
    const int64_t x = loc % width, y = loc / width;
    const acc_t shift = static_cast<acc_t>((coord % 2 == 0 ? x : y) * stride);
    out[idx] = static_cast<T>(shift + static_cast<acc_t>(cell[4 * anchor + coord]));
  }
}

at::Tensor grid_anchors_kernel(const at::Tensor& cell_in, int64_t height, int64_t width, int64_t stride) {
  check_boxes(cell_in, "cell_anchors");
  check_cuda_dtype(cell_in, "cell_anchors");
  TORCH_CHECK(height >= 0 && width >= 0, "feature size must be >= 0, got height ", height, ", width ", width);
  TORCH_CHECK(stride > 0, "stride must be > 0, got ", stride);
  const c10::cuda::CUDAGuard guard(cell_in.device());
  const auto cell = cell_in.contiguous();
  const int64_t a = cell.size(0);
  auto out = at::empty({height * width * a, 4}, cell.options());
  const int64_t total = out.numel();
  if (total == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, cell.scalar_type(), "mpirun_kit::grid_anchors_cuda", [&] {
    grid_anchors_cuda<scalar_t><<<cuda::blocks_for(total), cuda::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        total, width, a, stride, cell.data_ptr<scalar_t>(), out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("grid_anchors", TORCH_FN(grid_anchors_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
