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

// ---- Argument checks of one op, the same on every backend.  Each backend then
// adds its own dtype list (check_cpu_dtype / check_cuda_dtype) and, on CUDA, one device.

inline void check_encode_args(const at::Tensor& reference, const at::Tensor& proposals, at::ArrayRef<double> weights) {
  check_boxes(reference, "reference_boxes");
  check_boxes(proposals, "proposals");
  TORCH_CHECK(
      reference.size(0) == proposals.size(0),
      "reference_boxes and proposals must have one row each per pair, got ", reference.size(0), " and ",
      proposals.size(0), " rows");
  check_same_dtype(reference, "reference_boxes", proposals, "proposals");
  check_weights(weights);
}

inline void check_decode_args(const at::Tensor& deltas, const at::Tensor& boxes, at::ArrayRef<double> weights) {
  TORCH_CHECK(
      deltas.dim() == 2 && deltas.size(1) > 0 && deltas.size(1) % 4 == 0,
      "deltas must be [N, 4*K] (4 values per class), got ", shape_str(deltas));
  check_boxes(boxes, "boxes");
  TORCH_CHECK(
      boxes.size(0) == deltas.size(0),
      "boxes must have one row per row of deltas (", deltas.size(0), "), got ", boxes.size(0), " rows");
  check_same_dtype(deltas, "deltas", boxes, "boxes");
  check_weights(weights);
}

inline void check_proposal_args(
    const at::Tensor& anchors, const at::Tensor& objectness, const at::Tensor& deltas, const at::Tensor& image_sizes,
    const c10::optional<at::Tensor>& levels, int64_t pre_nms_top_n, int64_t post_nms_top_n, double min_size,
    at::ArrayRef<double> weights) {
  check_boxes(anchors, "anchors");
  const int64_t a = anchors.size(0);
  TORCH_CHECK(
      objectness.dim() == 2 && objectness.size(1) == a,
      "objectness must be [B, A] with A = ", a, " (the rows of anchors), got ", shape_str(objectness));
  const int64_t b = objectness.size(0);
  TORCH_CHECK(
      deltas.dim() == 3 && deltas.size(0) == b && deltas.size(1) == a && deltas.size(2) == 4,
      "deltas must be [B, A, 4] = [", b, ", ", a, ", 4], got ", shape_str(deltas));
  TORCH_CHECK(
      image_sizes.dim() == 2 && image_sizes.size(0) == b && image_sizes.size(1) == 2,
      "image_sizes must be [B, 2] = [", b, ", 2] rows of (h, w), got ", shape_str(image_sizes));
  check_same_dtype(anchors, "anchors", objectness, "objectness");
  check_same_dtype(anchors, "anchors", deltas, "deltas");
  check_weights(weights);
  TORCH_CHECK(pre_nms_top_n >= 1, "pre_nms_top_n must be an int >= 1, got ", pre_nms_top_n);
  TORCH_CHECK(post_nms_top_n >= 1, "post_nms_top_n must be an int >= 1, got ", post_nms_top_n);
  TORCH_CHECK(min_size >= 0, "min_size must be >= 0 pixels, got ", min_size);
  if (levels.has_value()) {
    check_rows(*levels, "levels", a, "anchors");
    TORCH_CHECK(!levels->is_floating_point(), "levels must be an integer tensor, got dtype ", levels->scalar_type());
  }
}

// level_sizes of generate_proposals_padded: anchors per level, in order, summing to A ([] = one level).
inline void check_level_sizes(at::IntArrayRef level_sizes, int64_t a) {
  int64_t total = 0;
  for (const int64_t n : level_sizes) {
    TORCH_CHECK(n >= 0, "level_sizes must be anchor counts >= 0, got ", level_sizes);
    total += n;
  }
  TORCH_CHECK(level_sizes.empty() || total == a, "level_sizes must sum to the rows of anchors (", a, "), got ",
              level_sizes, " (sum ", total, ")");
}

}  // namespace ops
}  // namespace mpirun_kit
