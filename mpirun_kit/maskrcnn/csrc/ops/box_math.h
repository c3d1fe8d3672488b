// Scalar box arithmetic shared by the CPU and CUDA kernels.
//
// The operation order matches the pure-PyTorch references
// (mpirun_kit/maskrcnn/ops/reference.py) exactly, so NMS takes the same
// keep/suppress decisions on both backends: IoU = inter / (area_a + area_b - inter),
// thresholds and weights converted to the box dtype before comparing.
#pragma once

#include <cmath>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MRK_HD __host__ __device__ __forceinline__
#else
#define MRK_HD inline
#endif

namespace mpirun_kit {
namespace ops {

// std:: overloads keep float math in float on the host; nvcc maps ::exp/::log
// to the float or double device functions by argument type.
template <typename T>
MRK_HD T mrk_exp(T x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}

template <typename T>
MRK_HD T mrk_log(T x) {
#if defined(__CUDA_ARCH__)
  return ::log(x);
#else
  return std::log(x);
#endif
}

template <typename T>
MRK_HD T mrk_max(T a, T b) {
  return a > b ? a : b;
}

template <typename T>
MRK_HD T mrk_min(T a, T b) {
  return a < b ? a : b;
}

// IoU of box i = (ax1, ay1, ax2, ay2) with area aa and box j with area ba.
template <typename T>
MRK_HD T iou(T ax1, T ay1, T ax2, T ay2, T aa, T bx1, T by1, T bx2, T by2, T ba) {
  T w = mrk_max(T(0), mrk_min(ax2, bx2) - mrk_max(ax1, bx1));
  T h = mrk_max(T(0), mrk_min(ay2, by2) - mrk_max(ay1, by1));
  T inter = w * h;
  return inter / (aa + ba - inter);
}

// Detectron box decode of one (dx, dy, dw, dh) against one box; writes 4 values to out.
template <typename T>
MRK_HD void decode_one(
    const T* d, T x1, T y1, T x2, T y2, T wx, T wy, T ww, T wh, T clip, T* out) {
  T w = x2 - x1;
  T h = y2 - y1;
  T cx = x1 + T(0.5) * w;
  T cy = y1 + T(0.5) * h;
  T dx = d[0] / wx;
  T dy = d[1] / wy;
  // clip only what compares above clip: a NaN stays NaN, as with torch.clamp(max=clip)
  T dw = d[2] / ww;
  T dh = d[3] / wh;
  dw = dw > clip ? clip : dw;
  dh = dh > clip ? clip : dh;
  T pcx = dx * w + cx;
  T pcy = dy * h + cy;
  T pw = mrk_exp(dw) * w;
  T ph = mrk_exp(dh) * h;
  out[0] = pcx - T(0.5) * pw;
  out[1] = pcy - T(0.5) * ph;
  out[2] = pcx + T(0.5) * pw;
  out[3] = pcy + T(0.5) * ph;
}

// Regression target of a reference (ground-truth) box r against a proposal p.
template <typename T>
MRK_HD void encode_one(const T* r, const T* p, T wx, T wy, T ww, T wh, T* out) {
  T ex_w = p[2] - p[0];
  T ex_h = p[3] - p[1];
  T ex_cx = p[0] + T(0.5) * ex_w;
  T ex_cy = p[1] + T(0.5) * ex_h;
  T gt_w = r[2] - r[0];
  T gt_h = r[3] - r[1];
  T gt_cx = r[0] + T(0.5) * gt_w;
  T gt_cy = r[1] + T(0.5) * gt_h;
  out[0] = wx * (gt_cx - ex_cx) / ex_w;
  out[1] = wy * (gt_cy - ex_cy) / ex_h;
  out[2] = ww * mrk_log(gt_w / ex_w);
  out[3] = wh * mrk_log(gt_h / ex_h);
}

}  // namespace ops
}  // namespace mpirun_kit
