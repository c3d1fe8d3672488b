// CPU kernels of encode_boxes / decode_boxes (schemas: ../box_coder.cpp; math: ../box_math.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../box_math.h"
#include "../checks.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MRK_DECODE_AVX2 1
#include <immintrin.h>
// Sleef's vectorised exp (1.0 ULP) as libtorch_cpu builds and exports it: ATen's own
// AVX2 exp is this function. Weak, so a torch built without Sleef leaves it null and
// the scalar loop runs instead of the whole extension failing to load.
extern "C" __attribute__((weak)) __m256 Sleef_expf8_u10avx2(__m256);
#endif

namespace mpirun_kit {
namespace ops {
namespace {

#if defined(MRK_DECODE_AVX2)
// Rows of 4 floats <-> 4 vectors of 8 (x1s, y1s, x2s, y2s). 8 rows are 32 contiguous floats.
__attribute__((target("avx2"))) inline void load_rows8(const float* p, __m256 v[4]) {
  const __m256 a0 = _mm256_loadu_ps(p), a1 = _mm256_loadu_ps(p + 8);
  const __m256 a2 = _mm256_loadu_ps(p + 16), a3 = _mm256_loadu_ps(p + 24);
  const __m256 r04 = _mm256_permute2f128_ps(a0, a2, 0x20), r15 = _mm256_permute2f128_ps(a0, a2, 0x31);
  const __m256 r26 = _mm256_permute2f128_ps(a1, a3, 0x20), r37 = _mm256_permute2f128_ps(a1, a3, 0x31);
  const __m256 t0 = _mm256_unpacklo_ps(r04, r15), t1 = _mm256_unpackhi_ps(r04, r15);
  const __m256 t2 = _mm256_unpacklo_ps(r26, r37), t3 = _mm256_unpackhi_ps(r26, r37);
  v[0] = _mm256_shuffle_ps(t0, t2, 0x44);
  v[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
  v[2] = _mm256_shuffle_ps(t1, t3, 0x44);
  v[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}

__attribute__((target("avx2"))) inline void store_rows8(float* p, const __m256 v[4]) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 r04 = _mm256_shuffle_ps(t0, t2, 0x44), r15 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 r26 = _mm256_shuffle_ps(t1, t3, 0x44), r37 = _mm256_shuffle_ps(t1, t3, 0xEE);
  _mm256_storeu_ps(p, _mm256_permute2f128_ps(r04, r15, 0x20));
  _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(r26, r37, 0x20));
  _mm256_storeu_ps(p + 16, _mm256_permute2f128_ps(r04, r15, 0x31));
  _mm256_storeu_ps(p + 24, _mm256_permute2f128_ps(r26, r37, 0x31));
}

// decode_one on 8 rows at once (float32, K = 1: row r uses box r). Same operations in the
// same order as decode_one; target "avx2" without "fma", so nothing is contracted into an
// FMA and the roundings stay those of the scalar kernel and the reference. Returns the
// first row it did not do (the scalar loop finishes the tail).
// kUnitWeights: all weights are 1 (the RPN's), and d / 1 == d exactly, so the four divisions go.
template <bool kUnitWeights>
__attribute__((target("avx2"))) int64_t decode_rows_avx2(
    const float* pd, const float* pb, int64_t lo, int64_t hi, float wx, float wy, float ww, float wh, float clip,
    float* po) {
  const __m256 half = _mm256_set1_ps(0.5f), vclip = _mm256_set1_ps(clip);
  const __m256 vwx = _mm256_set1_ps(wx), vwy = _mm256_set1_ps(wy), vww = _mm256_set1_ps(ww), vwh = _mm256_set1_ps(wh);
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    __m256 b[4], d[4], o[4];
    load_rows8(pb + 4 * i, b);
    load_rows8(pd + 4 * i, d);
    const __m256 w = _mm256_sub_ps(b[2], b[0]);
    const __m256 h = _mm256_sub_ps(b[3], b[1]);
    const __m256 cx = _mm256_add_ps(b[0], _mm256_mul_ps(half, w));
    const __m256 cy = _mm256_add_ps(b[1], _mm256_mul_ps(half, h));
    const __m256 dx = kUnitWeights ? d[0] : _mm256_div_ps(d[0], vwx);
    const __m256 dy = kUnitWeights ? d[1] : _mm256_div_ps(d[1], vwy);
    // min_ps returns its second operand when either is NaN: a NaN delta stays NaN, as in decode_one
    const __m256 dw = _mm256_min_ps(vclip, kUnitWeights ? d[2] : _mm256_div_ps(d[2], vww));
    const __m256 dh = _mm256_min_ps(vclip, kUnitWeights ? d[3] : _mm256_div_ps(d[3], vwh));
    const __m256 pcx = _mm256_add_ps(_mm256_mul_ps(dx, w), cx);
    const __m256 pcy = _mm256_add_ps(_mm256_mul_ps(dy, h), cy);
    const __m256 pw = _mm256_mul_ps(Sleef_expf8_u10avx2(dw), w);
    const __m256 ph = _mm256_mul_ps(Sleef_expf8_u10avx2(dh), h);
    o[0] = _mm256_sub_ps(pcx, _mm256_mul_ps(half, pw));
    o[1] = _mm256_sub_ps(pcy, _mm256_mul_ps(half, ph));
    o[2] = _mm256_add_ps(pcx, _mm256_mul_ps(half, pw));
    o[3] = _mm256_add_ps(pcy, _mm256_mul_ps(half, ph));
    store_rows8(po + 4 * i, o);
  }
  return i;
}

// Sleef's AVX2 variant also uses FMA instructions.
bool decode_avx2_available() {
  static const bool ok = Sleef_expf8_u10avx2 != nullptr && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma");
  return ok;
}
#endif

// The rows [lo, result) done with vector instructions; the scalar loop does the rest.
// Only float32 with one class, the RPN's case (100k+ anchors per image), is vectorised.
template <typename T>
int64_t decode_rows_vectorised(const T*, const T*, int64_t, int64_t lo, int64_t, T, T, T, T, T, T*) {
  return lo;
}

template <>
int64_t decode_rows_vectorised<float>(
    const float* pd, const float* pb, int64_t k, int64_t lo, int64_t hi, float wx, float wy, float ww, float wh,
    float clip, float* po) {
#if defined(MRK_DECODE_AVX2)
  if (k == 1 && decode_avx2_available()) {
    const bool unit = wx == 1.0f && wy == 1.0f && ww == 1.0f && wh == 1.0f;
    return unit ? decode_rows_avx2<true>(pd, pb, lo, hi, wx, wy, ww, wh, clip, po)
                : decode_rows_avx2<false>(pd, pb, lo, hi, wx, wy, ww, wh, clip, po);
  }
#endif
  return lo;
}

at::Tensor encode_boxes_kernel(const at::Tensor& reference_in, const at::Tensor& proposals_in, at::ArrayRef<double> weights) {
  check_encode_args(reference_in, proposals_in, weights);
  check_cpu_dtype(proposals_in, "proposals");
  const auto r = reference_in.contiguous();
  const auto p = proposals_in.contiguous();
  const int64_t n = r.size(0);
  auto out = at::empty({n, 4}, r.options());
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "mpirun_kit::encode_boxes_cpu", [&] {
    const scalar_t wx = weights[0], wy = weights[1], ww = weights[2], wh = weights[3];
    const scalar_t* pr = r.data_ptr<scalar_t>();
    const scalar_t* pp = p.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        encode_one(pr + 4 * i, pp + 4 * i, wx, wy, ww, wh, po + 4 * i);
      }
    });
  });
  return out;
}

at::Tensor decode_boxes_kernel(const at::Tensor& deltas_in, const at::Tensor& boxes_in, at::ArrayRef<double> weights, double clip_value) {
  check_decode_args(deltas_in, boxes_in, weights);
  check_cpu_dtype(deltas_in, "deltas");
  const auto d = deltas_in.contiguous();
  const auto b = boxes_in.contiguous();
  const int64_t n = d.size(0), k = d.size(1) / 4;
  auto out = at::empty_like(d, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES(d.scalar_type(), "mpirun_kit::decode_boxes_cpu", [&] {
    const scalar_t wx = weights[0], wy = weights[1], ww = weights[2], wh = weights[3];
    const scalar_t clip = static_cast<scalar_t>(clip_value);
    const scalar_t* pd = d.data_ptr<scalar_t>();
    const scalar_t* pb = b.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, std::max<int64_t>(1, 4096 / k), [&](int64_t lo, int64_t hi) {
      lo = decode_rows_vectorised(pd, pb, k, lo, hi, wx, wy, ww, wh, clip, po);
      for (int64_t i = lo; i < hi; ++i) {
        const scalar_t* q = pb + 4 * i;
        for (int64_t c = 0; c < k; ++c) {
          decode_one(pd + 4 * (i * k + c), q[0], q[1], q[2], q[3], wx, wy, ww, wh, clip, po + 4 * (i * k + c));
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CPU, m) {
  m.impl("encode_boxes", TORCH_FN(encode_boxes_kernel));
  m.impl("decode_boxes", TORCH_FN(decode_boxes_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
