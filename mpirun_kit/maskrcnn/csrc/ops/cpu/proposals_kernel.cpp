// CPU kernel of the fused proposal step (schema: ../proposals.cpp).
//
// Per image: pre-NMS top-k by objectness (per level when `levels` is given;
// ties broken by the lower anchor index), decode, clip to the image, drop boxes
// smaller than min_size, NMS (per level when `levels` is given), keep the first
// post_nms_top_n.  Images run in parallel; the order of every step matches
// reference.generate_proposals so both backends return the same boxes.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include "../box_math.h"
#include "../checks.h"
#include "nms_impl.h"

namespace mpirun_kit {
namespace ops {
namespace {

template <typename T>
void top_k(const T* score, std::vector<int64_t>& cand, int64_t k) {
  auto better = [score](int64_t a, int64_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); };
  if (static_cast<int64_t>(cand.size()) > k) {
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), better);
    cand.resize(k);
  } else {
    std::sort(cand.begin(), cand.end(), better);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> generate_proposals_kernel(
    const at::Tensor& anchors_in, const at::Tensor& objectness_in, const at::Tensor& deltas_in,
    const at::Tensor& image_sizes_in, const c10::optional<at::Tensor>& levels_in, int64_t pre_nms_top_n,
    int64_t post_nms_top_n, double nms_thresh, double min_size, at::ArrayRef<double> weights, double clip_value) {
  check_proposal_args(anchors_in, objectness_in, deltas_in, image_sizes_in, levels_in, pre_nms_top_n, post_nms_top_n,
                      min_size, weights);
  const int64_t a = anchors_in.size(0), b = objectness_in.size(0);
  check_cpu_dtype(anchors_in, "anchors");
  at::Tensor levels;
  if (levels_in.has_value()) {
    levels = levels_in->to(at::kLong).contiguous();
  }
  const auto anchors = anchors_in.contiguous();
  const auto objectness = objectness_in.contiguous();
  const auto deltas = deltas_in.contiguous();
  const auto sizes = image_sizes_in.to(at::kDouble).contiguous();
  const int64_t* lv = levels.defined() ? levels.data_ptr<int64_t>() : nullptr;

  // Level partition of the anchors, levels in increasing order (as torch.unique).
  std::map<int64_t, std::vector<int64_t>> by_level;
  if (lv != nullptr) {
    for (int64_t i = 0; i < a; ++i) {
      by_level[lv[i]].push_back(i);
    }
  }

  at::Tensor boxes_out, scores_out;
  auto counts = at::empty({b}, anchors.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES(anchors.scalar_type(), "mpirun_kit::generate_proposals_cpu", [&] {
    using T = scalar_t;
    const T* pa = anchors.data_ptr<T>();
    const T* po = objectness.data_ptr<T>();
    const T* pd = deltas.data_ptr<T>();
    const double* ps = sizes.data_ptr<double>();
    const T wx = weights[0], wy = weights[1], ww = weights[2], wh = weights[3];
    const T clip = static_cast<T>(clip_value), ms = static_cast<T>(min_size), thr = static_cast<T>(nms_thresh);
    std::vector<std::vector<T>> img_boxes(b), img_scores(b);
    at::parallel_for(0, b, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t im = lo; im < hi; ++im) {
        const T* score = po + im * a;
        std::vector<int64_t> sel;
        if (lv == nullptr) {
          sel.resize(a);
          std::iota(sel.begin(), sel.end(), 0);
          top_k(score, sel, pre_nms_top_n);
        } else {
          for (const auto& kv : by_level) {
            std::vector<int64_t> cand = kv.second;
            top_k(score, cand, pre_nms_top_n);
            sel.insert(sel.end(), cand.begin(), cand.end());
          }
        }
        const T ih = static_cast<T>(ps[2 * im]), iw = static_cast<T>(ps[2 * im + 1]);
        std::vector<T> boxes;  // decoded, clipped, big-enough boxes
        std::vector<T> scores;
        std::vector<int64_t> groups;
        boxes.reserve(4 * sel.size());
        for (int64_t s : sel) {
          const T* an = pa + 4 * s;
          T o[4];
          decode_one(pd + (im * a + s) * 4, an[0], an[1], an[2], an[3], wx, wy, ww, wh, clip, o);
          o[0] = std::min(std::max(o[0], T(0)), iw);
          o[1] = std::min(std::max(o[1], T(0)), ih);
          o[2] = std::min(std::max(o[2], T(0)), iw);
          o[3] = std::min(std::max(o[3], T(0)), ih);
          if (!((o[2] - o[0]) >= ms && (o[3] - o[1]) >= ms)) {
            continue;
          }
          boxes.insert(boxes.end(), o, o + 4);
          scores.push_back(score[s]);
          groups.push_back(lv != nullptr ? lv[s] : 0);
        }
        std::vector<int64_t> rows(scores.size());
        std::iota(rows.begin(), rows.end(), 0);
        auto keep = cpu::nms_rows<T>(boxes.data(), scores.data(), lv != nullptr ? groups.data() : nullptr, rows, thr);
        if (static_cast<int64_t>(keep.size()) > post_nms_top_n) {
          keep.resize(post_nms_top_n);
        }
        for (int64_t r : keep) {
          img_boxes[im].insert(img_boxes[im].end(), boxes.begin() + 4 * r, boxes.begin() + 4 * r + 4);
          img_scores[im].push_back(scores[r]);
        }
      }
    });
    int64_t total = 0;
    for (int64_t im = 0; im < b; ++im) {
      counts.data_ptr<int64_t>()[im] = static_cast<int64_t>(img_scores[im].size());
      total += static_cast<int64_t>(img_scores[im].size());
    }
    boxes_out = at::empty({total, 4}, anchors.options());
    scores_out = at::empty({total}, anchors.options());
    T* ob = boxes_out.data_ptr<T>();
    T* os = scores_out.data_ptr<T>();
    for (int64_t im = 0; im < b; ++im) {
      ob = std::copy(img_boxes[im].begin(), img_boxes[im].end(), ob);
      os = std::copy(img_scores[im].begin(), img_scores[im].end(), os);
    }
  });
  return {boxes_out, scores_out, counts};
}

// The padded variant: the same proposals, each image's in its own [post, 4] block.
// On the CPU nothing waits for a device, so it reuses the kernel above and pads.
std::tuple<at::Tensor, at::Tensor, at::Tensor> generate_proposals_padded_kernel(
    const at::Tensor& anchors, const at::Tensor& objectness, const at::Tensor& deltas, const at::Tensor& image_sizes,
    at::IntArrayRef level_sizes, int64_t pre_nms_top_n, int64_t post_nms_top_n, double nms_thresh, double min_size,
    at::ArrayRef<double> weights, double clip_value) {
  check_proposal_args(anchors, objectness, deltas, image_sizes, c10::nullopt, pre_nms_top_n, post_nms_top_n, min_size,
                      weights);
  check_level_sizes(level_sizes, anchors.size(0));
  c10::optional<at::Tensor> levels;
  if (!level_sizes.empty()) {
    auto lv = at::empty({anchors.size(0)}, anchors.options().dtype(at::kLong));
    int64_t* p = lv.data_ptr<int64_t>();
    for (int64_t l = 0; l < static_cast<int64_t>(level_sizes.size()); ++l) {
      p = std::fill_n(p, level_sizes[l], l);
    }
    levels = lv;
  }
  auto [boxes, scores, counts] = generate_proposals_kernel(anchors, objectness, deltas, image_sizes, levels,
                                                           pre_nms_top_n, post_nms_top_n, nms_thresh, min_size,
                                                           weights, clip_value);
  const int64_t b = objectness.size(0);
  auto out_boxes = at::zeros({b, post_nms_top_n, 4}, boxes.options());
  auto out_scores = at::zeros({b, post_nms_top_n}, scores.options());
  const int64_t* pc = counts.data_ptr<int64_t>();
  for (int64_t im = 0, row = 0; im < b; row += pc[im], ++im) {
    out_boxes[im].narrow(0, 0, pc[im]).copy_(boxes.narrow(0, row, pc[im]));
    out_scores[im].narrow(0, 0, pc[im]).copy_(scores.narrow(0, row, pc[im]));
  }
  return {out_boxes, out_scores, counts};
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CPU, m) {
  m.impl("generate_proposals", TORCH_FN(generate_proposals_kernel));
  m.impl("generate_proposals_padded", TORCH_FN(generate_proposals_padded_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
