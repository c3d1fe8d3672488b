// Input checks shared by every kernel of the mpirun_kit op library.
//
// The Python wrappers (mpirun_kit/maskrcnn/ops/) check first with the same
// wording; these checks protect direct callers of torch.ops.mpirun_kit.* and
// carry the offending value: "boxes must be [N, 4], got [7, 5]".
#pragma once

#include <ATen/ATen.h>

#include <sstream>
#include <string>

namespace mpirun_kit {
namespace ops {

inline std::string shape_str(const at::Tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int64_t i = 0; i < t.dim(); ++i) {
    os << (i ? ", " : "") << t.size(i);
  }
  os << "]";
  return os.str();
}

inline void check_boxes(const at::Tensor& t, const char* name, int64_t cols = 4) {
  TORCH_CHECK(
      t.dim() == 2 && t.size(1) == cols,
      name, " must be [N, ", cols, "], got ", shape_str(t));
  TORCH_CHECK(t.is_floating_point(), name, " must be a floating-point tensor, got dtype ", t.scalar_type());
}

inline void check_rows(const at::Tensor& t, const char* name, int64_t n, const char* of) {
  TORCH_CHECK(
      t.dim() == 1 && t.size(0) == n,
      name, " must be [N] with N = ", n, " (the rows of ", of, "), got ", shape_str(t));
}

inline void check_same_device(const at::Tensor& a, const char* an, const at::Tensor& b, const char* bn) {
  TORCH_CHECK(
      a.device() == b.device(),
      "all inputs must be on one device, got ", an, " on ", a.device(), ", ", bn, " on ", b.device());
}

inline void check_same_dtype(const at::Tensor& a, const char* an, const at::Tensor& b, const char* bn) {
  TORCH_CHECK(
      a.scalar_type() == b.scalar_type(),
      an, " and ", bn, " must have one dtype, got ", a.scalar_type(), " and ", b.scalar_type());
}

inline void check_cpu_dtype(const at::Tensor& t, const char* name) {
  TORCH_CHECK(
      t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
      name, " has dtype ", t.scalar_type(), ", which the cpu kernels do not support; use one of float32, float64");
}

inline void check_cuda_dtype(const at::Tensor& t, const char* name) {
  auto s = t.scalar_type();
  TORCH_CHECK(
      s == at::kFloat || s == at::kHalf || s == at::kBFloat16 || s == at::kDouble,
      name, " has dtype ", s, ", which the cuda kernels do not support; use one of float32, float16, bfloat16, float64");
}

inline void check_weights(const at::ArrayRef<double> w) {
  TORCH_CHECK(w.size() == 4, "weights must be 4 floats (wx, wy, ww, wh), got ", w.size(), " values");
  for (double x : w) {
    TORCH_CHECK(x > 0, "weights must be 4 positive floats (wx, wy, ww, wh), got ", w);
  }
}

// Channels-last output only for a channels-last-contiguous input that is not
// also plain contiguous; the fake kernels in ops/_meta.py apply the same rule.
inline bool use_channels_last(const at::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast) && !t.is_contiguous();
}

}  // namespace ops
}  // namespace mpirun_kit
