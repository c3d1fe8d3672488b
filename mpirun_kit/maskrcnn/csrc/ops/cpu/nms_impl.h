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
#include <cmath>
#include <cstdint>
#include <numeric>
#include <unordered_map>
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

// Brute force: every kept box against every later box.  O(n * kept).
template <typename T>
std::vector<int64_t> greedy_nms_dense(const SortedBoxes<T>& s, T thr) {
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

// Grid-indexed greedy NMS: same result as greedy_nms_dense, far fewer IoU tests
// when boxes are spread out.  With thr >= 0 a box can only be suppressed by a box
// whose intersection with it has positive area; any point of that intersection
// lies in a grid cell both boxes are registered in, so checking the boxes that
// share a cell with the kept box finds every candidate.  Cells are about one
// median box in size; a box spanning more than kMaxSpan cells per axis goes to a
// "large" list that every kept box checks directly.  Each cell lists its boxes
// in score order, so a binary search skips the boxes ranked before the kept one.
template <typename T>
std::vector<int64_t> greedy_nms_grid(const SortedBoxes<T>& s, T thr) {
  constexpr int64_t kMaxSpan = 4;
  const int64_t n = static_cast<int64_t>(s.x1.size());
  const T* x1 = s.x1.data();
  const T* y1 = s.y1.data();
  const T* x2 = s.x2.data();
  const T* y2 = s.y2.data();
  const T* ar = s.area.data();
  T minx = x1[0], miny = y1[0], maxx = x2[0], maxy = y2[0];
  std::vector<T> sizes(n);
  for (int64_t i = 0; i < n; ++i) {
    minx = std::min(minx, x1[i]);
    miny = std::min(miny, y1[i]);
    maxx = std::max(maxx, x2[i]);
    maxy = std::max(maxy, y2[i]);
    sizes[i] = std::max(x2[i] - x1[i], y2[i] - y1[i]);
  }
  std::nth_element(sizes.begin(), sizes.begin() + n / 2, sizes.end());
  const double extent = std::max(static_cast<double>(maxx - minx), static_cast<double>(maxy - miny));
  // Cell: the median box size, but no more than ~4n cells in all.
  double cell = std::max(static_cast<double>(sizes[n / 2]), extent / std::sqrt(4.0 * static_cast<double>(n)));
  if (!(cell > 0) || !std::isfinite(cell)) {
    return greedy_nms_dense(s, thr);
  }
  const int64_t gx = static_cast<int64_t>((static_cast<double>(maxx) - minx) / cell) + 1;
  const int64_t gy = static_cast<int64_t>((static_cast<double>(maxy) - miny) / cell) + 1;
  auto cx = [&](T v) { return std::min<int64_t>(gx - 1, static_cast<int64_t>((static_cast<double>(v) - minx) / cell)); };
  auto cy = [&](T v) { return std::min<int64_t>(gy - 1, static_cast<int64_t>((static_cast<double>(v) - miny) / cell)); };
  std::vector<std::vector<int64_t>> cells(gx * gy);
  std::vector<int64_t> large;
  for (int64_t i = 0; i < n; ++i) {  // increasing i: each cell list is in score order
    const int64_t ax = cx(x1[i]), bx = cx(x2[i]), ay = cy(y1[i]), by = cy(y2[i]);
    if (bx - ax >= kMaxSpan || by - ay >= kMaxSpan) {
      large.push_back(i);
      continue;
    }
    for (int64_t yy = ay; yy <= by; ++yy) {
      for (int64_t xx = ax; xx <= bx; ++xx) {
        cells[yy * gx + xx].push_back(i);
      }
    }
  }
  std::vector<uint8_t> sup(n, 0);
  std::vector<int64_t> keep;
  auto visit = [&](int64_t i, const std::vector<int64_t>& list) {
    const T ix1 = x1[i], iy1 = y1[i], ix2 = x2[i], iy2 = y2[i], ia = ar[i];
    for (auto it = std::upper_bound(list.begin(), list.end(), i); it != list.end(); ++it) {
      const int64_t j = *it;
      if (!sup[j] && iou(ix1, iy1, ix2, iy2, ia, x1[j], y1[j], x2[j], y2[j], ar[j]) > thr) {
        sup[j] = 1;
      }
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    if (sup[i]) {
      continue;
    }
    keep.push_back(i);
    const int64_t ax = cx(x1[i]), bx = cx(x2[i]), ay = cy(y1[i]), by = cy(y2[i]);
    for (int64_t yy = ay; yy <= by; ++yy) {
      for (int64_t xx = ax; xx <= bx; ++xx) {
        visit(i, cells[yy * gx + xx]);
      }
    }
    visit(i, large);
  }
  return keep;
}

// Positions (into the sorted arrays) that greedy NMS keeps, in order.
template <typename T>
std::vector<int64_t> greedy_nms_sorted(const SortedBoxes<T>& s, T thr) {
  const int64_t n = static_cast<int64_t>(s.x1.size());
  // The grid pays off from a few thousand boxes; it needs finite coordinates and
  // thr >= 0 (a negative threshold suppresses boxes that do not even touch).
  if (n < 2048 || !(thr >= 0)) {
    return greedy_nms_dense(s, thr);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(static_cast<double>(s.x1[i])) || !std::isfinite(static_cast<double>(s.y1[i])) ||
        !std::isfinite(static_cast<double>(s.x2[i])) || !std::isfinite(static_cast<double>(s.y2[i]))) {
      return greedy_nms_dense(s, thr);
    }
  }
  return greedy_nms_grid(s, thr);
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

// The first `max_keep` rows that nms_rows keeps (the same rows, in the same order), without
// running NMS over every box: boxes are visited in score order and each is tested against the
// kept boxes of its own group only (greedy NMS keeps a box exactly when no kept, higher-ranked
// box of its group suppresses it), stopping at max_keep kept.  The work is (boxes visited) x
// (kept per group): a detector keeping 100 of 80,000 class-boxes visits a few hundred.
template <typename T>
std::vector<int64_t> nms_rows_top(
    const T* boxes, const T* scores, const int64_t* groups, const std::vector<int64_t>& rows, T thr,
    int64_t max_keep) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<T> sc(n);
  for (int64_t i = 0; i < n; ++i) {
    sc[i] = scores[rows[i]];
  }
  const std::vector<int64_t> order = order_by_score(sc.data(), n);
  std::unordered_map<int64_t, SortedBoxes<T>> kept_by_group;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n && static_cast<int64_t>(out.size()) < max_keep; ++i) {
    const int64_t r = rows[order[i]];
    const T* b = boxes + 4 * r;
    const T bx1 = b[0], by1 = b[1], bx2 = b[2], by2 = b[3], ba = (bx2 - bx1) * (by2 - by1);
    SortedBoxes<T>& k = kept_by_group[groups != nullptr ? groups[r] : 0];
    bool suppressed = false;
    for (size_t j = 0; j < k.x1.size() && !suppressed; ++j) {
      // (kept, later) argument order, as greedy_nms_dense
      suppressed = iou(k.x1[j], k.y1[j], k.x2[j], k.y2[j], k.area[j], bx1, by1, bx2, by2, ba) > thr;
    }
    if (!suppressed) {
      k.resize(k.x1.size() + 1);
      k.set(k.x1.size() - 1, b);
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace cpu
}  // namespace ops
}  // namespace mpirun_kit
