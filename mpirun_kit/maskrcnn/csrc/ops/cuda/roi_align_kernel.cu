// CUDA kernels of roi_align and _roi_align_backward (schemas: ../roi_align.cpp).
//
// Same sampling as the CPU kernel (cpu/roi_align_kernel.cpp), one thread per
// output element.  Half and bfloat16 inputs are read as-is and accumulated in
// float (at::opmath_type).  Channels-last tensors are indexed [N, H, W, C] with
// the channel fastest, so neighbouring threads read neighbouring memory.
// Backward scatters with atomicAdd into a float (opmath) buffer, cast to the
// input dtype at the end, so half-precision gradients do not lose the sum.
//
// Two backward paths:
//   default: one thread per output gradient element, atomicAdd into a zero-filled buffer; fast,
//     but float additions in a varying order: not bitwise repeatable.
//   deterministic (torch.use_deterministic_algorithms(True)): one thread per (image, band of
//     rows, channel) owns those gradient cells, zeroes them and adds every contribution landing
//     there in a fixed order (RoI, then bin, then sample, then corner): no atomics, bitwise
//     repeatable, and no separate fill of the whole canvas; slower (each thread walks all RoIs).
//
// A RoI whose batch index is not an integer in [0, N) would read (forward) or write (backward)
// outside the input: both kernels check it on the device (CUDA_KERNEL_ASSERT_MSG: a device-side
// assert the host sees at its next synchronisation, as torch's own index kernels do; checking
// on the host would wait for the device every step), and skip the RoI where asserts are
// compiled out (forward: NaN output).  The CPU kernel checks on the host (TORCH_CHECK).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/Atomic.cuh>
#include <ATen/cuda/EmptyTensor.h>
#include <torch/library.h>

#include <cmath>

#include "../checks.h"
#include "cuda_utils.cuh"

namespace mpirun_kit {
namespace ops {
namespace {

template <typename acc_t>
struct Corners {
  int64_t p1, p2, p3, p4;
  acc_t w1, w2, w3, w4;
  bool valid;
};

template <typename acc_t>
__device__ __forceinline__ Corners<acc_t> corners(int64_t height, int64_t width, acc_t y, acc_t x) {
  Corners<acc_t> c;
  if (y < acc_t(-1) || y > static_cast<acc_t>(height) || x < acc_t(-1) || x > static_cast<acc_t>(width)) {
    c.valid = false;
    c.p1 = c.p2 = c.p3 = c.p4 = 0;
    c.w1 = c.w2 = c.w3 = c.w4 = 0;
    return c;
  }
  c.valid = true;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<acc_t>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<acc_t>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const acc_t ly = y - static_cast<acc_t>(y_low), lx = x - static_cast<acc_t>(x_low);
  const acc_t hy = acc_t(1) - ly, hx = acc_t(1) - lx;
  c.p1 = y_low * width + x_low;
  c.p2 = y_low * width + x_high;
  c.p3 = y_high * width + x_low;
  c.p4 = y_high * width + x_high;
  c.w1 = hy * hx;
  c.w2 = hy * lx;
  c.w3 = ly * hx;
  c.w4 = ly * lx;
  return c;
}

// Geometry of one RoI, computed in opmath precision.  batch is -1 when roi[0] is not an
// integer in [0, num_images) (NaN included): the callers must not touch the input then.
template <typename T, typename acc_t>
struct Roi {
  int64_t batch, grid_h, grid_w;
  acc_t y1, x1, bin_h, bin_w, count;

  __device__ __forceinline__ Roi(const T* roi, acc_t scale, int64_t ph, int64_t pw, int64_t sampling_ratio, bool aligned,
                                 int64_t num_images) {
    const acc_t offset = aligned ? acc_t(0.5) : acc_t(0);
    const acc_t b = static_cast<acc_t>(roi[0]);
    batch = (b >= acc_t(0) && b < static_cast<acc_t>(num_images) && b == floor(b)) ? static_cast<int64_t>(b) : -1;
    x1 = static_cast<acc_t>(roi[1]) * scale - offset;
    y1 = static_cast<acc_t>(roi[2]) * scale - offset;
    acc_t roi_w = static_cast<acc_t>(roi[3]) * scale - offset - x1;
    acc_t roi_h = static_cast<acc_t>(roi[4]) * scale - offset - y1;
    if (!aligned) {
      roi_w = roi_w > acc_t(1) ? roi_w : acc_t(1);
      roi_h = roi_h > acc_t(1) ? roi_h : acc_t(1);
    }
    bin_h = roi_h / static_cast<acc_t>(ph);
    bin_w = roi_w / static_cast<acc_t>(pw);
    grid_h = sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(ceil(roi_h / static_cast<acc_t>(ph)));
    grid_w = sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(ceil(roi_w / static_cast<acc_t>(pw)));
    grid_h = grid_h > 0 ? grid_h : 0;
    grid_w = grid_w > 0 ? grid_w : 0;
    const int64_t cnt = grid_h * grid_w;
    count = static_cast<acc_t>(cnt > 1 ? cnt : 1);
  }

  __device__ __forceinline__ acc_t y(int64_t ph, int64_t iy) const {
    return y1 + static_cast<acc_t>(ph) * bin_h + static_cast<acc_t>(iy + 0.5) * bin_h / static_cast<acc_t>(grid_h);
  }
  __device__ __forceinline__ acc_t x(int64_t pw, int64_t ix) const {
    return x1 + static_cast<acc_t>(pw) * bin_w + static_cast<acc_t>(ix + 0.5) * bin_w / static_cast<acc_t>(grid_w);
  }
};

// Decompose a flat output index into (k, c, ph, pw) for either layout.
template <bool CL>
__device__ __forceinline__ void unravel(int64_t idx, int64_t c, int64_t ph, int64_t pw, int64_t& k, int64_t& ch, int64_t& y, int64_t& x) {
  if (CL) {  // memory order [K, ph, pw, C]
    ch = idx % c;
    x = (idx / c) % pw;
    y = (idx / c / pw) % ph;
    k = idx / c / pw / ph;
  } else {  // memory order [K, C, ph, pw]
    x = idx % pw;
    y = (idx / pw) % ph;
    ch = (idx / pw / ph) % c;
    k = idx / pw / ph / c;
  }
}

#define MRK_BATCH_INDEX_MESSAGE "mpirun_kit::roi_align: rois[:, 0] must be batch indices in [0, N - 1] (N = input.size(0))"

template <typename T, bool CL>
__global__ void roi_align_forward_cuda(
    int64_t total, const T* __restrict__ input, const T* __restrict__ rois, at::opmath_type<T> scale, int64_t num_images,
    int64_t channels, int64_t height, int64_t width, int64_t ph, int64_t pw, int64_t sampling_ratio, bool aligned,
    T* __restrict__ out) {
  using acc_t = at::opmath_type<T>;
  MRK_CUDA_1D_LOOP(idx, total) {
    int64_t k, c, oy, ox;
    unravel<CL>(idx, channels, ph, pw, k, c, oy, ox);
    const Roi<T, acc_t> r(rois + 5 * k, scale, ph, pw, sampling_ratio, aligned, num_images);
    CUDA_KERNEL_ASSERT_MSG(r.batch >= 0, MRK_BATCH_INDEX_MESSAGE);
    if (r.batch < 0) {
      out[idx] = static_cast<T>(NAN);  // reached only where device asserts are compiled out
      continue;
    }
    // Offset of (batch, channel, 0, 0) and the distance between two pixels.
    const int64_t base = CL ? r.batch * height * width * channels + c : (r.batch * channels + c) * height * width;
    const int64_t step = CL ? channels : 1;
    acc_t sum = 0;
    for (int64_t iy = 0; iy < r.grid_h; ++iy) {
      const acc_t yy = r.y(oy, iy);
      for (int64_t ix = 0; ix < r.grid_w; ++ix) {
        const auto q = corners<acc_t>(height, width, yy, r.x(ox, ix));
        if (!q.valid) {
          continue;
        }
        sum += q.w1 * static_cast<acc_t>(input[base + q.p1 * step]) + q.w2 * static_cast<acc_t>(input[base + q.p2 * step]) +
            q.w3 * static_cast<acc_t>(input[base + q.p3 * step]) + q.w4 * static_cast<acc_t>(input[base + q.p4 * step]);
      }
    }
    out[idx] = static_cast<T>(sum / r.count);
  }
}

template <typename T, bool CL>
__global__ void roi_align_backward_cuda(
    int64_t total, const T* __restrict__ grad, const T* __restrict__ rois, at::opmath_type<T> scale, int64_t num_images,
    int64_t channels, int64_t height, int64_t width, int64_t ph, int64_t pw, int64_t sampling_ratio, bool aligned,
    at::opmath_type<T>* __restrict__ grad_input) {
  using acc_t = at::opmath_type<T>;
  MRK_CUDA_1D_LOOP(idx, total) {
    int64_t k, c, oy, ox;
    unravel<CL>(idx, channels, ph, pw, k, c, oy, ox);
    const Roi<T, acc_t> r(rois + 5 * k, scale, ph, pw, sampling_ratio, aligned, num_images);
    CUDA_KERNEL_ASSERT_MSG(r.batch >= 0, MRK_BATCH_INDEX_MESSAGE);
    if (r.batch < 0) {
      continue;  // reached only where device asserts are compiled out
    }
    const int64_t base = CL ? r.batch * height * width * channels + c : (r.batch * channels + c) * height * width;
    const int64_t step = CL ? channels : 1;
    const acc_t g = static_cast<acc_t>(grad[idx]) / r.count;
    for (int64_t iy = 0; iy < r.grid_h; ++iy) {
      const acc_t yy = r.y(oy, iy);
      for (int64_t ix = 0; ix < r.grid_w; ++ix) {
        const auto q = corners<acc_t>(height, width, yy, r.x(ox, ix));
        if (!q.valid) {
          continue;
        }
        gpuAtomicAdd(grad_input + base + q.p1 * step, g * q.w1);
        gpuAtomicAdd(grad_input + base + q.p2 * step, g * q.w2);
        gpuAtomicAdd(grad_input + base + q.p3 * step, g * q.w3);
        gpuAtomicAdd(grad_input + base + q.p4 * step, g * q.w4);
      }
    }
  }
}

// Rows of the gradient one thread of the deterministic backward owns (per image and channel).
constexpr int64_t kBandRows = 8;

// Deterministic backward: thread (n, band, c) owns grad_input[n, c, band rows, :], zeroes it and
// adds, RoI by RoI in index order, then by sample row (bin row, sample), bin column, sample
// column, the corner terms of every sample that lands in its rows: the same terms as
// roi_align_backward_cuda, in a fixed order.  Sample rows that miss the band are skipped before
// the columns are walked.
template <typename T, bool CL>
__global__ void roi_align_backward_deterministic_cuda(
    int64_t total, const T* __restrict__ grad, const T* __restrict__ rois, int64_t num_rois, at::opmath_type<T> scale,
    int64_t num_images, int64_t channels, int64_t height, int64_t width, int64_t ph, int64_t pw, int64_t sampling_ratio,
    bool aligned, at::opmath_type<T>* __restrict__ grad_input) {
  using acc_t = at::opmath_type<T>;
  const int64_t bands = (height + kBandRows - 1) / kBandRows;
  MRK_CUDA_1D_LOOP(idx, total) {
    // channel fastest: neighbouring threads touch neighbouring memory in channels-last
    const int64_t c = idx % channels;
    const int64_t band = (idx / channels) % bands;
    const int64_t n = idx / channels / bands;
    const int64_t row0 = band * kBandRows, row1 = min(row0 + kBandRows, height);
    const int64_t base = CL ? n * height * width * channels + c : (n * channels + c) * height * width;
    const int64_t step = CL ? channels : 1;
    for (int64_t p = row0 * width; p < row1 * width; ++p) {
      grad_input[base + p * step] = acc_t(0);
    }
    for (int64_t k = 0; k < num_rois; ++k) {
      const Roi<T, acc_t> r(rois + 5 * k, scale, ph, pw, sampling_ratio, aligned, num_images);
      CUDA_KERNEL_ASSERT_MSG(r.batch >= 0, MRK_BATCH_INDEX_MESSAGE);
      if (r.batch != n) {
        continue;
      }
      for (int64_t oy = 0; oy < ph; ++oy) {
        for (int64_t iy = 0; iy < r.grid_h; ++iy) {
          const acc_t yy = r.y(oy, iy);
          // the rows this sample row reaches (corners()'s clamping); most miss the band
          const auto rows = corners<acc_t>(height, width, yy, acc_t(0));
          if (!rows.valid) {
            continue;
          }
          const int64_t y_low = rows.p1 / width, y_high = rows.p3 / width;
          const bool low_in = y_low >= row0 && y_low < row1, high_in = y_high >= row0 && y_high < row1;
          if (!low_in && !high_in) {
            continue;
          }
          for (int64_t ox = 0; ox < pw; ++ox) {
            const int64_t gi = CL ? ((k * ph + oy) * pw + ox) * channels + c : ((k * channels + c) * ph + oy) * pw + ox;
            const acc_t g = static_cast<acc_t>(grad[gi]) / r.count;
            for (int64_t ix = 0; ix < r.grid_w; ++ix) {
              const auto q = corners<acc_t>(height, width, yy, r.x(ox, ix));
              if (!q.valid) {
                continue;
              }
              // p1, p2 lie on row y_low, p3, p4 on row y_high
              if (low_in) {
                grad_input[base + q.p1 * step] += g * q.w1;
                grad_input[base + q.p2 * step] += g * q.w2;
              }
              if (high_in) {
                grad_input[base + q.p3 * step] += g * q.w3;
                grad_input[base + q.p4 * step] += g * q.w4;
              }
            }
          }
        }
      }
    }
  }
}

at::Tensor roi_align_forward_kernel(
    const at::Tensor& input_in, const at::Tensor& rois_in, double spatial_scale, int64_t pooled_h, int64_t pooled_w,
    int64_t sampling_ratio, bool aligned) {
  TORCH_CHECK(input_in.dim() == 4, "input must be [N, C, H, W], got ", shape_str(input_in));
  check_boxes(rois_in, "rois", 5);
  check_same_dtype(input_in, "input", rois_in, "rois");
  check_same_device(input_in, "input", rois_in, "rois");
  check_cuda_dtype(input_in, "input");
  TORCH_CHECK(pooled_h > 0 && pooled_w > 0, "output size must be positive, got (", pooled_h, ", ", pooled_w, ")");
  const c10::cuda::CUDAGuard guard(input_in.device());
  const int64_t n = input_in.size(0), c = input_in.size(1), h = input_in.size(2), w = input_in.size(3), k = rois_in.size(0);
  TORCH_CHECK(k == 0 || (h > 0 && w > 0), "input must have a non-empty H x W map, got ", shape_str(input_in));
  const bool cl = use_channels_last(input_in);
  const auto fmt = cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const auto input = input_in.contiguous(fmt);
  const auto rois = rois_in.contiguous();
  auto out = at::empty({k, c, pooled_h, pooled_w}, input.options().memory_format(fmt));
  const int64_t total = out.numel();
  if (total == 0) {
    return out;
  }
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "mpirun_kit::roi_align_forward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t scale = static_cast<acc_t>(spatial_scale);
    if (cl) {
      roi_align_forward_cuda<scalar_t, true><<<cuda::blocks_for(total), cuda::kThreads, 0, stream>>>(
          total, input.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), scale, n, c, h, w, pooled_h, pooled_w,
          sampling_ratio, aligned, out.data_ptr<scalar_t>());
    } else {
      roi_align_forward_cuda<scalar_t, false><<<cuda::blocks_for(total), cuda::kThreads, 0, stream>>>(
          total, input.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), scale, n, c, h, w, pooled_h, pooled_w,
          sampling_ratio, aligned, out.data_ptr<scalar_t>());
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor roi_align_backward_kernel(
    const at::Tensor& grad_in, const at::Tensor& rois_in, double spatial_scale, int64_t pooled_h, int64_t pooled_w,
    int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t sampling_ratio, bool aligned) {
  check_boxes(rois_in, "rois", 5);
  check_same_dtype(grad_in, "grad", rois_in, "rois");
  check_same_device(grad_in, "grad", rois_in, "rois");
  check_cuda_dtype(grad_in, "grad");
  const int64_t k = rois_in.size(0);
  TORCH_CHECK(
      grad_in.dim() == 4 && grad_in.size(0) == k && grad_in.size(1) == channels && grad_in.size(2) == pooled_h &&
          grad_in.size(3) == pooled_w,
      "grad must be [K, C, oh, ow] = [", k, ", ", channels, ", ", pooled_h, ", ", pooled_w, "], got ", shape_str(grad_in));
  const c10::cuda::CUDAGuard guard(grad_in.device());
  const bool cl = use_channels_last(grad_in);
  const auto fmt = cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const auto grad = grad_in.contiguous(fmt);
  const auto rois = rois_in.contiguous();
  const auto acc_type = at::toOpMathType(grad.scalar_type());
  const auto acc_options = grad.options().dtype(acc_type).memory_format(fmt);
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (at::globalContext().deterministicAlgorithms()) {
    // every cell is zeroed and summed by the one thread that owns it: no fill pass, no atomics.
    // at::detail::empty_cuda, not at::empty: in deterministic mode at::empty fills new memory
    // with NaN (torch.utils.deterministic.fill_uninitialized_memory), a full pass for nothing here
    auto grad_input = at::Tensor(at::detail::empty_cuda({batch, channels, height, width}, acc_options));
    const int64_t total = batch * ((height + kBandRows - 1) / kBandRows) * channels;
    if (total > 0 && width > 0) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "mpirun_kit::roi_align_backward_deterministic_cuda", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const acc_t scale = static_cast<acc_t>(spatial_scale);
        if (cl) {
          roi_align_backward_deterministic_cuda<scalar_t, true><<<cuda::blocks_for(total), cuda::kThreads, 0, stream>>>(
              total, grad.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), k, scale, batch, channels, height, width,
              pooled_h, pooled_w, sampling_ratio, aligned, grad_input.data_ptr<acc_t>());
        } else {
          roi_align_backward_deterministic_cuda<scalar_t, false><<<cuda::blocks_for(total), cuda::kThreads, 0, stream>>>(
              total, grad.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), k, scale, batch, channels, height, width,
              pooled_h, pooled_w, sampling_ratio, aligned, grad_input.data_ptr<acc_t>());
        }
      });
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return grad_input.to(grad.scalar_type());
  }
  // atomics add into the buffer, so it starts at zero (at::zeros ignores a memory format in
  // its options; empty + zero_ keeps it)
  auto grad_input = at::empty({batch, channels, height, width}, acc_options).zero_();
  const int64_t total = grad.numel();
  if (total > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "mpirun_kit::roi_align_backward_cuda", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      const acc_t scale = static_cast<acc_t>(spatial_scale);
      if (cl) {
        roi_align_backward_cuda<scalar_t, true><<<cuda::blocks_for(total), cuda::kThreads, 0, stream>>>(
            total, grad.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), scale, batch, channels, height, width, pooled_h,
            pooled_w, sampling_ratio, aligned, grad_input.data_ptr<acc_t>());
      } else {
        roi_align_backward_cuda<scalar_t, false><<<cuda::blocks_for(total), cuda::kThreads, 0, stream>>>(
            total, grad.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), scale, batch, channels, height, width, pooled_h,
            pooled_w, sampling_ratio, aligned, grad_input.data_ptr<acc_t>());
      }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return grad_input.to(grad.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("roi_align", TORCH_FN(roi_align_forward_kernel));
  m.impl("_roi_align_backward", TORCH_FN(roi_align_backward_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
