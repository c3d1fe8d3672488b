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
  auto boxes = at::empty({b, k, 4}, anchors.options());
  auto valid = at::empty({b, k}, anchors.options().dtype(at::kBool));
  if (b * k > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, anchors.scalar_type(), "mpirun_kit::generate_proposals_cuda", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      decode_clip_filter_cuda<scalar_t><<<cuda::blocks_for(b * k), cuda::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
          b, k, a, sel.data_ptr<int64_t>(), anchors.data_ptr<scalar_t>(), deltas.data_ptr<scalar_t>(),
          sizes.data_ptr<scalar_t>(), static_cast<acc_t>(weights[0]), static_cast<acc_t>(weights[1]),
          static_cast<acc_t>(weights[2]), static_cast<acc_t>(weights[3]), static_cast<acc_t>(clip_value),
          static_cast<acc_t>(min_size), boxes.data_ptr<scalar_t>(), valid.data_ptr<bool>());
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
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

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CUDA, m) {
  m.impl("generate_proposals", TORCH_FN(generate_proposals_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
