// Greedy NMS on the CPU, shared by the nms, batched_nms and generate_proposals kernels.
//
// Boxes are first sorted by decreasing score (stable: ties keep input order)
// and copied into contiguous structure-of-arrays, so the inner loop over later
// boxes is branch-free and vectorises; for long inner loops it is also split
// across threads (at::parallel_for runs inline below the grain size).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "../box_math.h"

namespace mpirun_kit {
namespace ops {
namespace cpu {

// Boxes of one NMS problem in score order (structure of arrays).
template <typename T>
struct SortedBoxes {
  std::vector<T> x1, y1, x2, y2, area;
  void resize(size_t n) {
    x1.resize(n);
    y1.resize(n);
    x2.resize(n);
    y2.resize(n);
    area.resize(n);
  }
  void set(size_t i, const T* b) {
    x1[i] = b[0];
    y1[i] = b[1];
    x2[i] = b[2];
    y2[i] = b[3];
    area[i] = (b[2] - b[0]) * (b[3] - b[1]);
  }
};

// Positions (into the sorted arrays) that greedy NMS keeps, in order.
template <typename T>
std::vector<int64_t> greedy_nms_sorted(const SortedBoxes<T>& s, T thr) {
  const int64_t n = static_cast<int64_t>(s.x1.size());
  std::vector<uint8_t> suppressed(n, 0);
  std::vector<int64_t> keep;
  const T* x1 = s.x1.data();
  const T* y1 = s.y1.data();
  const T* x2 = s.x2.data();
  const T* y2 = s.y2.data();
  const T* ar = s.area.data();
  uint8_t* sup = suppressed.data();
  for (int64_t i = 0; i < n; ++i) {
    if (sup[i]) {
      continue;
    }
    keep.push_back(i);
    const T ix1 = x1[i], iy1 = y1[i], ix2 = x2[i], iy2 = y2[i], ia = ar[i];
    // 16k pairs per task: below that a parallel region costs more than it saves.
    at::parallel_for(i + 1, n, 16384, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const T o = iou(ix1, iy1, ix2, iy2, ia, x1[j], y1[j], x2[j], y2[j], ar[j]);
        sup[j] |= static_cast<uint8_t>(o > thr);
      }
    });
  }
  return keep;
}

// Stable order of positions by decreasing score.
template <typename T>
std::vector<int64_t> order_by_score(const T* scores, int64_t n) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [scores](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  return order;
}

// NMS over rows `rows` (indices into boxes/scores) with optional group ids.
// Returns the kept rows, by decreasing score (ties: earlier in `rows` first).
template <typename T>
std::vector<int64_t> nms_rows(
    const T* boxes, const T* scores, const int64_t* groups, const std::vector<int64_t>& rows, T thr) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<T> sc(n);
  for (int64_t i = 0; i < n; ++i) {
    sc[i] = scores[rows[i]];
  }
  std::vector<int64_t> order = order_by_score(sc.data(), n);  // positions into rows
  std::vector<int64_t> kept_pos;
  if (groups == nullptr) {
    SortedBoxes<T> s;
    s.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      s.set(i, boxes + 4 * rows[order[i]]);
    }
    kept_pos = greedy_nms_sorted(s, thr);
  } else {
    // Split the score-ordered list into groups (stable, so each group stays in
    // score order), run NMS per group in parallel, merge by score position.
    std::vector<int64_t> by_group(n);
    std::iota(by_group.begin(), by_group.end(), 0);
    std::stable_sort(by_group.begin(), by_group.end(), [&](int64_t a, int64_t b) {
      return groups[rows[order[a]]] < groups[rows[order[b]]];
    });
    std::vector<std::pair<int64_t, int64_t>> spans;  // [begin, end) in by_group
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1;
      const int64_t g = groups[rows[order[by_group[i]]]];
      while (j < n && groups[rows[order[by_group[j]]]] == g) {
        ++j;
      }
      spans.emplace_back(i, j);
      i = j;
    }
    std::vector<std::vector<int64_t>> per_group(spans.size());
    at::parallel_for(0, static_cast<int64_t>(spans.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t g = b; g < e; ++g) {
        const auto [lo, hi] = spans[g];
        SortedBoxes<T> s;
        s.resize(hi - lo);
        for (int64_t i = lo; i < hi; ++i) {
          s.set(i - lo, boxes + 4 * rows[order[by_group[i]]]);
        }
        for (int64_t k : greedy_nms_sorted(s, thr)) {
          per_group[g].push_back(by_group[lo + k]);
        }
      }
    });
    for (auto& v : per_group) {
      kept_pos.insert(kept_pos.end(), v.begin(), v.end());
    }
    std::sort(kept_pos.begin(), kept_pos.end());
  }
  std::vector<int64_t> out(kept_pos.size());
  for (size_t i = 0; i < kept_pos.size(); ++i) {
    out[i] = rows[order[kept_pos[i]]];
  }
  return out;
}

}  // namespace cpu
}  // namespace ops
}  // namespace mpirun_kit
