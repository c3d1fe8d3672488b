// CUDA kernel of the fused proposal step (schema: ../proposals.cpp).
//
// Whole batch at once where the work is regular: a stable segmented sort picks
// the pre-NMS top-k of every image (per level when `levels` is given), one
// kernel decodes, clips and flags too-small boxes for all images, then the
// bitmask NMS (nms_impl.cuh) runs per image, grouped by level.  Tie-breaking
// and step order match the CPU kernel and reference.generate_proposals.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <limits>
#include <tuple>
#include <vector>

#include "../box_math.h"
#include "../checks.h"
#include "cuda_utils.cuh"
#include "nms_impl.cuh"

namespace mpirun_kit {
namespace ops {
namespace {

template <typename T>
__global__ void decode_clip_filter_cuda(
    int64_t b, int64_t k, int64_t a, const int64_t* __restrict__ sel, const T* __restrict__ anchors,
    const T* __restrict__ deltas, const T* __restrict__ sizes, at::opmath_type<T> wx, at::opmath_type<T> wy,
    at::opmath_type<T> ww, at::opmath_type<T> wh, at::opmath_type<T> clip, at::opmath_type<T> min_size,
    T* __restrict__ out, bool* __restrict__ valid) {
  using acc_t = at::opmath_type<T>;
  MRK_CUDA_1D_LOOP(idx, b * k) {
    const int64_t im = idx / k;
    const int64_t s = sel[idx];
    const T* an = anchors + 4 * s;
    const T* d = deltas + (im * a + s) * 4;
    acc_t dd[4] = {d[0], d[1], d[2], d[3]};
    acc_t o[4];
    decode_one(dd, static_cast<acc_t>(an[0]), static_cast<acc_t>(an[1]), static_cast<acc_t>(an[2]),
               static_cast<acc_t>(an[3]), wx, wy, ww, wh, clip, o);
    const acc_t ih = sizes[2 * im], iw = sizes[2 * im + 1];
    o[0] = mrk_min(mrk_max(o[0], acc_t(0)), iw);
    o[1] = mrk_min(mrk_max(o[1], acc_t(0)), ih);
    o[2] = mrk_min(mrk_max(o[2], acc_t(0)), iw);
    o[3] = mrk_min(mrk_max(o[3], acc_t(0)), ih);
    for (int c = 0; c < 4; ++c) {
      out[4 * idx + c] = static_cast<T>(o[c]);
    }
    valid[idx] = (o[2] - o[0]) >= min_size && (o[3] - o[1]) >= min_size;
  }
}

// [B, k, 4] decoded, clipped boxes for the selected anchors sel [B, k], and their min-size flags.
std::tuple<at::Tensor, at::Tensor> decode_clip_filter(const at::Tensor& anchors, const at::Tensor& deltas,
                                                      const at::Tensor& sizes, const at::Tensor& sel,
                                                      at::ArrayRef<double> weights, double clip_value, double min_size) {
  const int64_t a = anchors.size(0), b = sel.size(0), k = sel.size(1);
  auto boxes = at::empty({b, k, 4}, anchors.options());
  auto valid = at::empty({b, k}, anchors.options().dtype(at::kBool));
  if (b * k == 0) {
    return {boxes, valid};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, anchors.scalar_type(), "mpirun_kit::decode_clip_filter_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    decode_clip_filter_cuda<scalar_t><<<cuda::blocks_for(b * k), cuda::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        b, k, a, sel.data_ptr<int64_t>(), anchors.data_ptr<scalar_t>(), deltas.data_ptr<scalar_t>(),
        sizes.data_ptr<scalar_t>(), static_cast<acc_t>(weights[0]), static_cast<acc_t>(weights[1]),
        static_cast<acc_t>(weights[2]), static_cast<acc_t>(weights[3]), static_cast<acc_t>(clip_value),
        static_cast<acc_t>(min_size), boxes.data_ptr<scalar_t>(), valid.data_ptr<bool>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {boxes, valid};
}

// [B, k] anchor indices of the k best scores per row, stable (ties: lower index).
at::Tensor top_k_stable(const at::Tensor& scores, int64_t k) {
  auto order = std::get<1>(scores.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
  return order.narrow(1, 0, std::min<int64_t>(k, scores.size(1)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> generate_proposals_kernel(
    const at::Tensor& anchors_in, const at::Tensor& objectness_in, const at::Tensor& deltas_in,
    const at::Tensor& image_sizes_in, const c10::optional<at::Tensor>& levels_in, int64_t pre_nms_top_n,
    int64_t post_nms_top_n, double nms_thresh, double min_size, at::ArrayRef<double> weights, double clip_value) {
  check_proposal_args(anchors_in, objectness_in, deltas_in, image_sizes_in, levels_in, pre_nms_top_n, post_nms_top_n,
                      min_size, weights);
  const int64_t a = anchors_in.size(0), b = objectness_in.size(0);
  check_same_device(anchors_in, "anchors", objectness_in, "objectness");
  check_same_device(anchors_in, "anchors", deltas_in, "deltas");
  check_cuda_dtype(anchors_in, "anchors");
  const c10::cuda::CUDAGuard guard(anchors_in.device());
  const auto anchors = anchors_in.contiguous();
  const auto objectness = objectness_in.contiguous();
  const auto deltas = deltas_in.contiguous();
  const auto sizes = image_sizes_in.to(anchors.device(), anchors.scalar_type()).contiguous();

  // 1. pre-NMS top-k, per level in increasing level order when levels are given.
  at::Tensor sel, sel_levels;
  if (levels_in.has_value()) {
    const auto levels = levels_in->to(anchors.device(), at::kLong);
    const auto unique = std::get<0>(at::_unique(levels, /*sorted=*/true)).cpu();
    std::vector<at::Tensor> parts;
    for (int64_t i = 0; i < unique.numel(); ++i) {
      const auto members = (levels == unique[i].item<int64_t>()).nonzero().view(-1);
      const auto best = top_k_stable(objectness.index_select(1, members), pre_nms_top_n);
      parts.push_back(members.index_select(0, best.reshape(-1)).view_as(best));
    }
    sel = parts.empty() ? at::empty({b, 0}, anchors.options().dtype(at::kLong)) : at::cat(parts, 1);
    sel_levels = levels.index_select(0, sel.reshape(-1)).view_as(sel);
  } else {
    sel = top_k_stable(objectness, pre_nms_top_n);
  }
  sel = sel.contiguous();
  const int64_t k = sel.size(1);

  // 2. decode, clip, min-size flag for every selected anchor of every image.
  auto [boxes, valid] = decode_clip_filter(anchors, deltas, sizes, sel, weights, clip_value, min_size);
  const auto sel_scores = objectness.gather(1, sel);

  // 3. NMS and post-NMS top-k per image.
  std::vector<at::Tensor> out_boxes, out_scores;
  std::vector<int64_t> counts;
  for (int64_t im = 0; im < b; ++im) {
    const auto keep = valid[im].nonzero().view(-1);
    const auto bx = boxes[im].index_select(0, keep);
    const auto sc = sel_scores[im].index_select(0, keep);
    const auto groups = sel_levels.defined() ? sel_levels[im].index_select(0, keep) : at::Tensor();
    auto kept = cuda::nms_indices(bx, sc, groups, nms_thresh);
    kept = kept.narrow(0, 0, std::min<int64_t>(post_nms_top_n, kept.size(0)));
    out_boxes.push_back(bx.index_select(0, kept));
    out_scores.push_back(sc.index_select(0, kept));
    counts.push_back(kept.size(0));
  }
  auto counts_t = at::tensor(counts, at::TensorOptions().dtype(at::kLong)).to(anchors.device());
  if (b == 0) {
    return {at::empty({0, 4}, anchors.options()), at::empty({0}, anchors.options()), counts_t};
  }
  return {at::cat(out_boxes), at::cat(out_scores), counts_t};
}

// The training step's variant: every shape is known on the host, nothing is read
// back.  Level ranges come from level_sizes (host ints) and are sliced, top-k per
// slice; one bitmask NMS covers all (image, level) groups, with a suppression
// bitmask per image and one CUDA block per image walking its segment; the post-NMS top-k is a top-k over the kept scores,
// so the outputs have fixed sizes plus per-image counts.  Same proposals as
// generate_proposals up to the order of exactly tied scores.
std::tuple<at::Tensor, at::Tensor, at::Tensor> generate_proposals_padded_kernel(
    const at::Tensor& anchors_in, const at::Tensor& objectness_in, const at::Tensor& deltas_in,
    const at::Tensor& image_sizes_in, at::IntArrayRef level_sizes, int64_t pre_nms_top_n, int64_t post_nms_top_n,
    double nms_thresh, double min_size, at::ArrayRef<double> weights, double clip_value) {
  check_proposal_args(anchors_in, objectness_in, deltas_in, image_sizes_in, c10::nullopt, pre_nms_top_n,
                      post_nms_top_n, min_size, weights);
  const int64_t a = anchors_in.size(0), b = objectness_in.size(0);
  check_level_sizes(level_sizes, a);
  check_same_device(anchors_in, "anchors", objectness_in, "objectness");
  check_same_device(anchors_in, "anchors", deltas_in, "deltas");
  check_cuda_dtype(anchors_in, "anchors");
  const c10::cuda::CUDAGuard guard(anchors_in.device());
  const auto anchors = anchors_in.contiguous();
  const auto objectness = objectness_in.contiguous();
  const auto deltas = deltas_in.contiguous();
  // the wrapper passes image_sizes on the device already (a pinned, non-blocking copy)
  const auto sizes = image_sizes_in.to(anchors.device(), anchors.scalar_type()).contiguous();
  const auto long_opts = anchors.options().dtype(at::kLong);

  // 1. pre-NMS top-k per level: each level is a slice of the anchors
  std::vector<int64_t> per_level(level_sizes.begin(), level_sizes.end());
  if (per_level.empty()) {
    per_level.push_back(a);
  }
  const int64_t num_levels = static_cast<int64_t>(per_level.size());
  std::vector<at::Tensor> sel_parts, level_parts;
  int64_t start = 0;
  for (int64_t l = 0; l < num_levels; ++l) {
    const int64_t n = per_level[l];
    if (n > 0 && b > 0) {
      const int64_t k = std::min(pre_nms_top_n, n);
      sel_parts.push_back(std::get<1>(objectness.narrow(1, start, n).topk(k, 1, true, true)) + start);
      level_parts.push_back(at::full({k}, l, long_opts));
    }
    start += n;
  }
  auto out_boxes = at::zeros({b, post_nms_top_n, 4}, anchors.options());
  auto out_scores = at::zeros({b, post_nms_top_n}, anchors.options());
  auto counts = at::zeros({b}, long_opts);
  if (sel_parts.empty()) {
    return {out_boxes, out_scores, counts};
  }
  const auto sel = at::cat(sel_parts, 1).contiguous();
  const int64_t k = sel.size(1);

  // 2. decode, clip, min-size flag for every selected anchor of every image
  auto [boxes, valid] = decode_clip_filter(anchors, deltas, sizes, sel, weights, clip_value, min_size);
  const auto sel_scores = objectness.gather(1, sel);

  // 3. one NMS over all (image, level) groups; too-small boxes go to a per-image
  // group of their own (they are dropped below), so each image keeps its segment
  const auto image = at::arange(b, long_opts).view({b, 1});
  const auto level = at::cat(level_parts).view({1, k});
  const auto groups = at::where(valid, image * (num_levels + 1) + level, image * (num_levels + 1) + num_levels);
  auto order = std::get<1>(sel_scores.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
  const auto by_group = std::get<1>(groups.gather(1, order).sort(/*stable=*/true, /*dim=*/1, /*descending=*/false));
  order = order.gather(1, by_group);
  const auto flat = (order + image * k).view({-1});
  const auto sorted_boxes = boxes.view({-1, 4}).index_select(0, flat).contiguous();
  const auto sorted_groups = groups.view({-1}).index_select(0, flat).contiguous();
  const auto keep_sorted = cuda::nms_keep_mask_segments(sorted_boxes, sorted_groups, nms_thresh, k);
  const auto keep = at::zeros({b * k}, keep_sorted.options()).scatter_(0, flat, keep_sorted).view({b, k}).to(at::kBool) & valid;

  // 4. post-NMS top-k per image over the kept scores; fixed-size outputs + counts
  const int64_t kp = std::min(post_nms_top_n, k);
  const auto top = std::get<1>(sel_scores.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity())
                                   .topk(kp, 1, true, true));
  counts = keep.sum(1).clamp_max(post_nms_top_n).to(at::kLong);
  const auto slot_ok = at::arange(kp, long_opts).view({1, kp}) < counts.view({b, 1});
  out_boxes.narrow(1, 0, kp).copy_(boxes.gather(1, top.unsqueeze(2).expand({b, kp, 4})).masked_fill(slot_ok.logical_not().unsqueeze(2), 0));
  out_scores.narrow(1, 0, kp).copy_(sel_scores.gather(1, top).masked_fill(slot_ok.logical_not(), 0));
  return {out_boxes, out_scores, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("generate_proposals", TORCH_FN(generate_proposals_kernel));
  m.impl("generate_proposals_padded", TORCH_FN(generate_proposals_padded_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
