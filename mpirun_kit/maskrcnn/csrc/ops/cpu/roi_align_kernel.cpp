// CPU kernels of roi_align and _roi_align_backward (schemas: ../roi_align.cpp).
//
// Algorithm (Detectron / torchvision): each output bin averages
// grid_h x grid_w bilinear samples; grid = sampling_ratio, or
// ceil(roi_size / pooled_size) when sampling_ratio <= 0.  For every RoI the
// sample positions and bilinear weights are computed once ("pre-calc") and
// reused for all channels.  Two memory layouts:
//   NCHW: one channel plane at a time (the four corners are near each other);
//   channels-last: the channel loop is innermost and contiguous, so it vectorises.
// Forward runs RoIs in parallel (each writes its own output rows); backward
// runs channel ranges in parallel, so no two threads add into one gradient cell.
// The backward computes every RoI's samples once, shared by the threads, and
// picks its algorithm by the amount of work (see roi_align_backward_kernel).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "../checks.h"

namespace mpirun_kit {
namespace ops {
namespace {

template <typename T>
struct Sample {
  int64_t p1, p2, p3, p4;  // spatial offsets y*W + x of the four corners
  T w1, w2, w3, w4;        // bilinear weights (all 0 outside the map)
};

template <typename T>
struct RoiGeometry {
  int64_t batch;
  int64_t grid_h, grid_w;
  T count;  // samples per bin, at least 1
};

// Fill `samples` (bin-major: ph, pw, iy, ix) for one RoI; return its geometry.
template <typename T>
RoiGeometry<T> precalc(
    const T* roi, T scale, int64_t height, int64_t width, int64_t pooled_h, int64_t pooled_w,
    int64_t sampling_ratio, bool aligned, std::vector<Sample<T>>& samples) {
  const T offset = aligned ? T(0.5) : T(0);
  const T x1 = roi[1] * scale - offset;
  const T y1 = roi[2] * scale - offset;
  const T x2 = roi[3] * scale - offset;
  const T y2 = roi[4] * scale - offset;
  T roi_w = x2 - x1;
  T roi_h = y2 - y1;
  if (!aligned) {
    // Legacy Mask R-CNN behaviour: malformed RoIs are forced to be 1x1.
    roi_w = std::max(roi_w, T(1));
    roi_h = std::max(roi_h, T(1));
  }
  const T bin_h = roi_h / static_cast<T>(pooled_h);
  const T bin_w = roi_w / static_cast<T>(pooled_w);
  RoiGeometry<T> g;
  g.batch = static_cast<int64_t>(roi[0]);
  g.grid_h = sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(std::ceil(roi_h / static_cast<T>(pooled_h)));
  g.grid_w = sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(std::ceil(roi_w / static_cast<T>(pooled_w)));
  g.grid_h = std::max<int64_t>(g.grid_h, 0);
  g.grid_w = std::max<int64_t>(g.grid_w, 0);
  g.count = static_cast<T>(std::max<int64_t>(g.grid_h * g.grid_w, 1));
  samples.resize(pooled_h * pooled_w * g.grid_h * g.grid_w);
  int64_t idx = 0;
  for (int64_t ph = 0; ph < pooled_h; ++ph) {
    for (int64_t pw = 0; pw < pooled_w; ++pw) {
      for (int64_t iy = 0; iy < g.grid_h; ++iy) {
        const T yy = y1 + static_cast<T>(ph) * bin_h + static_cast<T>(iy + 0.5) * bin_h / static_cast<T>(g.grid_h);
        for (int64_t ix = 0; ix < g.grid_w; ++ix) {
          const T xx = x1 + static_cast<T>(pw) * bin_w + static_cast<T>(ix + 0.5) * bin_w / static_cast<T>(g.grid_w);
          Sample<T>& s = samples[idx++];
          T y = yy, x = xx;
          if (y < T(-1) || y > static_cast<T>(height) || x < T(-1) || x > static_cast<T>(width)) {
            s = Sample<T>{0, 0, 0, 0, T(0), T(0), T(0), T(0)};
            continue;
          }
          if (y <= 0) y = 0;
          if (x <= 0) x = 0;
          int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
          if (y_low >= height - 1) {
            y_high = y_low = height - 1;
            y = static_cast<T>(y_low);
          } else {
            y_high = y_low + 1;
          }
          if (x_low >= width - 1) {
            x_high = x_low = width - 1;
            x = static_cast<T>(x_low);
          } else {
            x_high = x_low + 1;
          }
          const T ly = y - static_cast<T>(y_low), lx = x - static_cast<T>(x_low);
          const T hy = T(1) - ly, hx = T(1) - lx;
          s.p1 = y_low * width + x_low;
          s.p2 = y_low * width + x_high;
          s.p3 = y_high * width + x_low;
          s.p4 = y_high * width + x_high;
          s.w1 = hy * hx;
          s.w2 = hy * lx;
          s.w3 = ly * hx;
          s.w4 = ly * lx;
        }
      }
    }
  }
  return g;
}

void check_rois(const at::Tensor& input, const at::Tensor& rois) {
  TORCH_CHECK(input.dim() == 4, "input must be [N, C, H, W], got ", shape_str(input));
  check_boxes(rois, "rois", 5);
  check_same_dtype(input, "input", rois, "rois");
  check_same_device(input, "input", rois, "rois");
}

void check_batch_indices(const at::Tensor& rois, int64_t batch) {
  if (rois.size(0) == 0) {
    return;
  }
  const auto col = rois.select(1, 0);
  const double lo = col.min().item<double>(), hi = col.max().item<double>();
  TORCH_CHECK(
      lo >= 0 && hi < batch && lo == std::floor(lo) && hi == std::floor(hi),
      "rois[:, 0] must be batch indices in [0, ", batch - 1, "], got values in [", lo, ", ", hi, "]");
}

at::Tensor roi_align_forward_kernel(
    const at::Tensor& input_in, const at::Tensor& rois_in, double spatial_scale, int64_t pooled_h,
    int64_t pooled_w, int64_t sampling_ratio, bool aligned) {
  check_rois(input_in, rois_in);
  check_cpu_dtype(input_in, "input");
  TORCH_CHECK(pooled_h > 0 && pooled_w > 0, "output size must be positive, got (", pooled_h, ", ", pooled_w, ")");
  const int64_t n = input_in.size(0), c = input_in.size(1), h = input_in.size(2), w = input_in.size(3);
  const int64_t k = rois_in.size(0);
  TORCH_CHECK(k == 0 || (h > 0 && w > 0), "input must have a non-empty H x W map, got ", shape_str(input_in));
  check_batch_indices(rois_in, n);
  const bool cl = use_channels_last(input_in);
  const auto fmt = cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const auto input = input_in.contiguous(fmt);
  const auto rois = rois_in.contiguous();
  auto out = at::empty({k, c, pooled_h, pooled_w}, input.options().memory_format(fmt));
  if (k == 0 || c == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "mpirun_kit::roi_align_forward_cpu", [&] {
    const scalar_t* in = input.data_ptr<scalar_t>();
    const scalar_t* pr = rois.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    const scalar_t scale = static_cast<scalar_t>(spatial_scale);
    const int64_t bins = pooled_h * pooled_w;
    at::parallel_for(0, k, 1, [&](int64_t lo, int64_t hi) {
      std::vector<Sample<scalar_t>> samples;
      std::vector<scalar_t> acc(cl ? c : 0);
      for (int64_t r = lo; r < hi; ++r) {
        const auto g = precalc(pr + 5 * r, scale, h, w, pooled_h, pooled_w, sampling_ratio, aligned, samples);
        const int64_t per_bin = g.grid_h * g.grid_w;
        if (!cl) {
          for (int64_t ch = 0; ch < c; ++ch) {
            const scalar_t* plane = in + (g.batch * c + ch) * h * w;
            scalar_t* o = po + (r * c + ch) * bins;
            for (int64_t b = 0; b < bins; ++b) {
              scalar_t v = 0;
              for (int64_t i = b * per_bin; i < (b + 1) * per_bin; ++i) {
                const auto& s = samples[i];
                v += s.w1 * plane[s.p1] + s.w2 * plane[s.p2] + s.w3 * plane[s.p3] + s.w4 * plane[s.p4];
              }
              o[b] = v / g.count;
            }
          }
        } else {
          const scalar_t* img = in + g.batch * h * w * c;
          for (int64_t b = 0; b < bins; ++b) {
            std::fill(acc.begin(), acc.end(), scalar_t(0));
            scalar_t* a = acc.data();
            for (int64_t i = b * per_bin; i < (b + 1) * per_bin; ++i) {
              const auto& s = samples[i];
              const scalar_t* v1 = img + s.p1 * c;
              const scalar_t* v2 = img + s.p2 * c;
              const scalar_t* v3 = img + s.p3 * c;
              const scalar_t* v4 = img + s.p4 * c;
              for (int64_t ch = 0; ch < c; ++ch) {
                a[ch] += s.w1 * v1[ch] + s.w2 * v2[ch] + s.w3 * v3[ch] + s.w4 * v4[ch];
              }
            }
            scalar_t* o = po + (r * bins + b) * c;  // [K, ph, pw, C] in memory
            for (int64_t ch = 0; ch < c; ++ch) {
              o[ch] = a[ch] / g.count;
            }
          }
        }
      }
    });
  });
  return out;
}

// The backward's samples of every RoI, computed once (in parallel over RoIs) and shared by all
// threads: offsets as int32 (a plane holds < 2^31 cells, checked) and the weights already divided
// by the RoI's sample count, 32 bytes per sample for float.
template <typename T>
struct BackSample {
  int32_t p1, p2, p3, p4;
  T w1, w2, w3, w4;
};

template <typename T>
struct BackRois {
  std::vector<BackSample<T>> samples;  // RoI r's bins at samples[start[r] .. start[r + 1]), bin-major
  std::vector<int64_t> start, batch, per_bin;
};

template <typename T>
BackRois<T> precalc_all(
    const T* rois, int64_t k, T scale, int64_t height, int64_t width, int64_t pooled_h, int64_t pooled_w,
    int64_t sampling_ratio, bool aligned) {
  BackRois<T> out;
  out.start.assign(k + 1, 0);
  out.batch.resize(k);
  out.per_bin.resize(k);
  const int64_t bins = pooled_h * pooled_w;
  for (int64_t r = 0; r < k; ++r) {  // grid sizes: a cheap serial pass for the offsets
    const T* roi = rois + 5 * r;
    int64_t gh = sampling_ratio, gw = sampling_ratio;
    if (sampling_ratio <= 0) {
      // the same arithmetic as precalc, so the adaptive grid comes out the same
      const T off = aligned ? T(0.5) : T(0);
      T rw = (roi[3] * scale - off) - (roi[1] * scale - off);
      T rh = (roi[4] * scale - off) - (roi[2] * scale - off);
      if (!aligned) {
        rw = std::max(rw, T(1));
        rh = std::max(rh, T(1));
      }
      gh = std::max<int64_t>(static_cast<int64_t>(std::ceil(rh / static_cast<T>(pooled_h))), 0);
      gw = std::max<int64_t>(static_cast<int64_t>(std::ceil(rw / static_cast<T>(pooled_w))), 0);
    }
    out.start[r + 1] = out.start[r] + bins * gh * gw;
  }
  out.samples.resize(out.start[k]);
  at::parallel_for(0, k, 16, [&](int64_t lo, int64_t hi) {
    std::vector<Sample<T>> tmp;
    for (int64_t r = lo; r < hi; ++r) {
      const auto g = precalc(rois + 5 * r, scale, height, width, pooled_h, pooled_w, sampling_ratio, aligned, tmp);
      const int64_t n = static_cast<int64_t>(tmp.size());
      TORCH_INTERNAL_ASSERT(n == out.start[r + 1] - out.start[r], "roi_align backward: grid size mismatch");
      out.batch[r] = g.batch;
      out.per_bin[r] = g.grid_h * g.grid_w;
      const T inv = T(1) / g.count;
      BackSample<T>* dst = out.samples.data() + out.start[r];
      for (int64_t i = 0; i < n; ++i) {
        const auto& s = tmp[i];
        dst[i] = BackSample<T>{static_cast<int32_t>(s.p1), static_cast<int32_t>(s.p2), static_cast<int32_t>(s.p3),
                               static_cast<int32_t>(s.p4), s.w1 * inv, s.w2 * inv, s.w3 * inv, s.w4 * inv};
      }
    }
  });
  return out;
}

at::Tensor roi_align_backward_kernel(
    const at::Tensor& grad_in, const at::Tensor& rois_in, double spatial_scale, int64_t pooled_h,
    int64_t pooled_w, int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t sampling_ratio,
    bool aligned) {
  check_boxes(rois_in, "rois", 5);
  check_same_dtype(grad_in, "grad", rois_in, "rois");
  check_cpu_dtype(grad_in, "grad");
  const int64_t k = rois_in.size(0);
  TORCH_CHECK(
      grad_in.dim() == 4 && grad_in.size(0) == k && grad_in.size(1) == channels && grad_in.size(2) == pooled_h &&
          grad_in.size(3) == pooled_w,
      "grad must be [K, C, oh, ow] = [", k, ", ", channels, ", ", pooled_h, ", ", pooled_w, "], got ", shape_str(grad_in));
  TORCH_CHECK(height * width < (int64_t(1) << 31), "roi_align backward: a feature map of ", height, " x ", width,
              " has more than 2^31 cells");
  check_batch_indices(rois_in, batch);
  const bool cl_in = use_channels_last(grad_in);
  const auto rois = rois_in.contiguous();
  const int64_t hw = height * width, bins = pooled_h * pooled_w;
  // Two algorithms.  Channels-last: per sample, four contiguous channel rows get w * grad,
  // vectorised over the channels.  NCHW: per channel block, every RoI adds four scalars per sample
  // into its planes.  An NCHW grad with many samples runs the channels-last one on a transposed
  // copy and transposes the result back (two passes over the canvas); with few samples (a small
  // mask batch) the transposes would cost more than the scalar adds they save.  Issue #32: the
  // NCHW scatter of the box head's 1024 RoIs was the step's largest CPU kernel.
  const int64_t samples_est = k * bins * (sampling_ratio > 0 ? sampling_ratio * sampling_ratio : 4);
  const bool cl = cl_in || samples_est > batch * hw;
  const auto grad = grad_in.contiguous(cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  auto out = at::empty({batch, channels, height, width},
                       grad.options().memory_format(cl ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous));
  const auto result = [&](at::Tensor t) { return cl && !cl_in ? t.contiguous() : t; };
  if (out.numel() == 0) {
    return result(out);
  }
  if (k == 0 || channels == 0) {
    out.zero_();
    return result(out);
  }
  AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "mpirun_kit::roi_align_backward_cpu", [&] {
    const scalar_t* pg = grad.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    const auto all = precalc_all(rois.data_ptr<scalar_t>(), k, static_cast<scalar_t>(spatial_scale), height, width,
                                 pooled_h, pooled_w, sampling_ratio, aligned);
    const BackSample<scalar_t>* smp = all.samples.data();
    // No separate serial zero-fill of the whole canvas: the zeroing is split like the work (by
    // pixel ranges for channels-last, by each task's own planes for NCHW).  Tasks own channel
    // ranges either way: no two threads add into one cell, so the sum is deterministic.
    if (cl) {
      at::parallel_for(0, batch * hw, 4096, [&](int64_t lo, int64_t hi) {
        std::fill(po + lo * channels, po + hi * channels, scalar_t(0));
      });
      at::parallel_for(0, channels, 16, [&](int64_t c0, int64_t c1) {
        const int64_t nc = c1 - c0;
        for (int64_t r = 0; r < k; ++r) {
          const int64_t per_bin = all.per_bin[r];
          if (per_bin == 0) {
            continue;
          }
          const BackSample<scalar_t>* rs = smp + all.start[r];
          scalar_t* img = po + all.batch[r] * hw * channels + c0;
          for (int64_t b = 0; b < bins; ++b) {
            const scalar_t* gr = pg + (r * bins + b) * channels + c0;
            for (int64_t i = b * per_bin; i < (b + 1) * per_bin; ++i) {
              const auto& s = rs[i];
              // four loops, not one: corners coincide at the map's edge (p1 == p2), and each loop
              // alone vectorises over the contiguous channels
              scalar_t* v = img + static_cast<int64_t>(s.p1) * channels;
              for (int64_t ch = 0; ch < nc; ++ch) v[ch] += gr[ch] * s.w1;
              v = img + static_cast<int64_t>(s.p2) * channels;
              for (int64_t ch = 0; ch < nc; ++ch) v[ch] += gr[ch] * s.w2;
              v = img + static_cast<int64_t>(s.p3) * channels;
              for (int64_t ch = 0; ch < nc; ++ch) v[ch] += gr[ch] * s.w3;
              v = img + static_cast<int64_t>(s.p4) * channels;
              for (int64_t ch = 0; ch < nc; ++ch) v[ch] += gr[ch] * s.w4;
            }
          }
        }
      });
      return;
    }
    // NCHW: a block of kBlock channels (x batch planes) stays in cache while every RoI adds into
    // it, and the shared samples are read once per block, not once per channel
    constexpr int64_t kBlock = 8;
    const int64_t blocks = (channels + kBlock - 1) / kBlock;
    at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t c0 = blk * kBlock, c1 = std::min(channels, c0 + kBlock);
        for (int64_t n = 0; n < batch; ++n) {
          std::fill_n(po + (n * channels + c0) * hw, (c1 - c0) * hw, scalar_t(0));
        }
        for (int64_t r = 0; r < k; ++r) {
          const int64_t per_bin = all.per_bin[r];
          if (per_bin == 0) {
            continue;
          }
          const BackSample<scalar_t>* rs = smp + all.start[r];
          scalar_t* planes = po + all.batch[r] * channels * hw;
          for (int64_t ch = c0; ch < c1; ++ch) {
            scalar_t* plane = planes + ch * hw;
            const scalar_t* gr = pg + (r * channels + ch) * bins;
            for (int64_t b = 0; b < bins; ++b) {
              const scalar_t gv = gr[b];
              const BackSample<scalar_t>* s = rs + b * per_bin;
              for (int64_t i = 0; i < per_bin; ++i) {
                plane[s[i].p1] += gv * s[i].w1;
                plane[s[i].p2] += gv * s[i].w2;
                plane[s[i].p3] += gv * s[i].w3;
                plane[s[i].p4] += gv * s[i].w4;
              }
            }
          }
        }
      }
    });
  });
  return result(out);
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CPU, m) {
  m.impl("roi_align", TORCH_FN(roi_align_forward_kernel));
  m.impl("_roi_align_backward", TORCH_FN(roi_align_backward_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
