// CUDA kernels of encode_boxes / decode_boxes (schemas: ../box_coder.cpp; math:
// ../box_math.h), one thread per box (per box and class for decode), in opmath precision.
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
__global__ void encode_cuda(
    int64_t n, const T* __restrict__ r, const T* __restrict__ p, at::opmath_type<T> wx, at::opmath_type<T> wy,
    at::opmath_type<T> ww, at::opmath_type<T> wh, T* __restrict__ out) {
  using acc_t = at::opmath_type<T>;
  MRK_CUDA_1D_LOOP(i, n) {
    acc_t rr[4], pp[4], o[4];
    for (int c = 0; c < 4; ++c) {
      rr[c] = r[4 * i + c];
      pp[c] = p[4 * i + c];
    }
    encode_one(rr, pp, wx, wy, ww, wh, o);
    for (int c = 0; c < 4; ++c) {
      out[4 * i + c] = static_cast<T>(o[c]);
    }
  }
}

template <typename T>
__global__ void decode_cuda(
    int64_t n, int64_t k, const T* __restrict__ d, const T* __restrict__ b, at::opmath_type<T> wx, at::opmath_type<T> wy,
    at::opmath_type<T> ww, at::opmath_type<T> wh, at::opmath_type<T> clip, T* __restrict__ out) {
  using acc_t = at::opmath_type<T>;
  MRK_CUDA_1D_LOOP(idx, n * k) {
    const int64_t i = idx / k;
    acc_t dd[4], o[4];
    for (int c = 0; c < 4; ++c) {
      dd[c] = d[4 * idx + c];
    }
    decode_one(dd, static_cast<acc_t>(b[4 * i]), static_cast<acc_t>(b[4 * i + 1]), static_cast<acc_t>(b[4 * i + 2]),
               static_cast<acc_t>(b[4 * i + 3]), wx, wy, ww, wh, clip, o);
    for (int c = 0; c < 4; ++c) {
      out[4 * idx + c] = static_cast<T>(o[c]);
    }
  }
}

at::Tensor encode_boxes_kernel(const at::Tensor& reference_in, const at::Tensor& proposals_in, at::ArrayRef<double> weights) {
  check_encode_args(reference_in, proposals_in, weights);
  check_same_device(reference_in, "reference_boxes", proposals_in, "proposals");
  check_cuda_dtype(proposals_in, "proposals");
  const c10::cuda::CUDAGuard guard(proposals_in.device());
  const auto r = reference_in.contiguous();
  const auto p = proposals_in.contiguous();
  const int64_t n = r.size(0);
  auto out = at::empty({n, 4}, r.options());
  if (n == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, r.scalar_type(), "mpirun_kit::encode_boxes_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    encode_cuda<scalar_t><<<cuda::blocks_for(n), cuda::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        n, r.data_ptr<scalar_t>(), p.data_ptr<scalar_t>(), static_cast<acc_t>(weights[0]), static_cast<acc_t>(weights[1]),
        static_cast<acc_t>(weights[2]), static_cast<acc_t>(weights[3]), out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor decode_boxes_kernel(const at::Tensor& deltas_in, const at::Tensor& boxes_in, at::ArrayRef<double> weights, double clip_value) {
  check_decode_args(deltas_in, boxes_in, weights);
  check_same_device(deltas_in, "deltas", boxes_in, "boxes");
  check_cuda_dtype(deltas_in, "deltas");
  const c10::cuda::CUDAGuard guard(deltas_in.device());
  const auto d = deltas_in.contiguous();
  const auto b = boxes_in.contiguous();
  const int64_t n = d.size(0), k = d.size(1) / 4;
  auto out = at::empty_like(d, at::MemoryFormat::Contiguous);
  if (n == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, d.scalar_type(), "mpirun_kit::decode_boxes_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    decode_cuda<scalar_t><<<cuda::blocks_for(n * k), cuda::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        n, k, d.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), static_cast<acc_t>(weights[0]), static_cast<acc_t>(weights[1]),
        static_cast<acc_t>(weights[2]), static_cast<acc_t>(weights[3]), static_cast<acc_t>(clip_value),
        out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("encode_boxes", TORCH_FN(encode_boxes_kernel));
  m.impl("decode_boxes", TORCH_FN(decode_boxes_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
