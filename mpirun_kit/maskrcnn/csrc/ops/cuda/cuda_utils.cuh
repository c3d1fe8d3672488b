// Launch helpers shared by the CUDA kernels of the mpirun_kit op library.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>

namespace mpirun_kit {
namespace ops {
namespace cuda {

constexpr int kThreads = 256;

// Grid-stride loop: one launch covers any n, capped grid size.
#define MRK_CUDA_1D_LOOP(i, n)                                                                  \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);       \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

inline dim3 blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, 65535LL * 8))));
}

inline void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor here, got one on ", t.device());
}

}  // namespace cuda
}  // namespace ops
}  // namespace mpirun_kit
