// Bitmask NMS on the GPU (declarations and the algorithm's description: nms_impl.cuh).
#include "nms_impl.cuh"

#include <ATen/OpMathType.h>

#include <vector>

#include "../box_math.h"
#include "cuda_utils.cuh"

namespace mpirun_kit {
namespace ops {
namespace cuda {
namespace {

constexpr int kNmsBlock = 64;

// Masks per segment: the boxes are cut into segments of seg_len consecutive sorted positions (one
// per image for the proposal step; one segment of n for plain NMS), and block (x, y, z) compares
// row block y with column block x of segment z only.  Segment z's masks are rows
// [z * seg_len, z * seg_len + len_z) of a [n, cb] array, cb = ceil(seg_len / 64) words per row,
// bit k of word j = "suppresses the segment's box 64 * j + k": n * cb words in all, not the
// n * ceil(n / 64) of one mask over the whole batch (4 images of 10k boxes: 50 MB, not 200 MB).
template <typename T>
__global__ void nms_mask_kernel(
    int64_t n, int64_t seg_len, at::opmath_type<T> thr, const T* __restrict__ boxes, const int64_t* __restrict__ groups,
    unsigned long long* __restrict__ mask) {
  using acc_t = at::opmath_type<T>;
  const int64_t row_start = blockIdx.y, col_start = blockIdx.x;
  if (row_start > col_start) {
    return;
  }
  const int64_t seg0 = static_cast<int64_t>(blockIdx.z) * seg_len;
  const int64_t len = min(seg_len, n - seg0);
  if (row_start * kNmsBlock >= len || col_start * kNmsBlock >= len) {
    return;  // the last segment may be shorter than seg_len
  }
  boxes += 4 * seg0;
  if (groups != nullptr) {
    groups += seg0;
  }
  const int64_t col_blocks = (seg_len + kNmsBlock - 1) / kNmsBlock;
  mask += seg0 * col_blocks;
  const int row_size = static_cast<int>(min(len - row_start * kNmsBlock, static_cast<int64_t>(kNmsBlock)));
  const int col_size = static_cast<int>(min(len - col_start * kNmsBlock, static_cast<int64_t>(kNmsBlock)));
  __shared__ acc_t cb[kNmsBlock * 5];
  __shared__ int64_t cg[kNmsBlock];
  if (threadIdx.x < col_size) {
    const int64_t j = col_start * kNmsBlock + threadIdx.x;
    const acc_t x1 = boxes[4 * j], y1 = boxes[4 * j + 1], x2 = boxes[4 * j + 2], y2 = boxes[4 * j + 3];
    cb[5 * threadIdx.x + 0] = x1;
    cb[5 * threadIdx.x + 1] = y1;
    cb[5 * threadIdx.x + 2] = x2;
    cb[5 * threadIdx.x + 3] = y2;
    cb[5 * threadIdx.x + 4] = (x2 - x1) * (y2 - y1);
    cg[threadIdx.x] = groups != nullptr ? groups[j] : 0;
  }
  __syncthreads();
  if (threadIdx.x < row_size) {
    const int64_t i = row_start * kNmsBlock + threadIdx.x;
    const acc_t x1 = boxes[4 * i], y1 = boxes[4 * i + 1], x2 = boxes[4 * i + 2], y2 = boxes[4 * i + 3];
    const acc_t area = (x2 - x1) * (y2 - y1);
    const int64_t g = groups != nullptr ? groups[i] : 0;
    unsigned long long t = 0;
    // Groups are sorted, so a column block whose first box is of a later group than
    // this box (or whose last is earlier) holds nothing this box may suppress.
    if (cg[0] <= g && cg[col_size - 1] >= g) {
      for (int k = (row_start == col_start) ? threadIdx.x + 1 : 0; k < col_size; ++k) {
        const acc_t o = iou(x1, y1, x2, y2, area, cb[5 * k], cb[5 * k + 1], cb[5 * k + 2], cb[5 * k + 3], cb[5 * k + 4]);
        if (o > thr && cg[k] == g) {
          t |= 1ULL << k;
        }
      }
    }
    mask[i * col_blocks + col_start] = t;
  }
}

// Greedy pass over the masks in one block; keep[i] = 1 for kept sorted positions.
__global__ void nms_gather_keep_kernel(int64_t n, const unsigned long long* __restrict__ mask, uint8_t* __restrict__ keep) {
  extern __shared__ unsigned long long removed[];
  const int64_t col_blocks = (n + kNmsBlock - 1) / kNmsBlock;
  for (int64_t j = threadIdx.x; j < col_blocks; j += blockDim.x) {
    removed[j] = 0;
  }
  __syncthreads();
  for (int64_t nb = 0; nb < col_blocks; ++nb) {
    unsigned long long removed_val = removed[nb];
    __syncthreads();
    const int64_t base = nb * kNmsBlock;
    for (int k = 0; k < kNmsBlock; ++k) {
      const int64_t i = base + k;
      if (i >= n) {
        break;
      }
      // removed_val is read from shared memory after a barrier, so every thread
      // takes the same branch and the barrier below is reached by all of them.
      if (!(removed_val & (1ULL << k))) {
        if (threadIdx.x == 0) {
          keep[i] = 1;
        }
        const unsigned long long* p = mask + i * col_blocks;
        for (int64_t j = nb + threadIdx.x; j < col_blocks; j += blockDim.x) {
          removed[j] |= p[j];
        }
        __syncthreads();
        removed_val = removed[nb];
        // Second barrier: nobody may OR in the next kept box's row before every
        // thread has read this value.
        __syncthreads();
      }
    }
  }
}

// Greedy pass per segment: block s walks sorted positions [s * seg_len, (s + 1) * seg_len) over
// the segment's own masks (nms_mask_kernel's layout), keeping its "removed" words in shared memory.
__global__ void nms_gather_keep_segments_kernel(int64_t n, int64_t seg_len, const unsigned long long* __restrict__ mask,
                                                uint8_t* __restrict__ keep) {
  extern __shared__ unsigned long long removed[];
  const int64_t col_blocks = (seg_len + kNmsBlock - 1) / kNmsBlock;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * seg_len;
  const int64_t len = min(seg_len, n - lo);
  if (len <= 0) {
    return;  // uniform over the block: no barrier is skipped by some threads only
  }
  const int64_t words = (len + kNmsBlock - 1) / kNmsBlock;
  for (int64_t j = threadIdx.x; j < words; j += blockDim.x) {
    removed[j] = 0;
  }
  __syncthreads();
  for (int64_t i = 0; i < len; ++i) {
    const int64_t nb = i / kNmsBlock;
    const unsigned long long rv = removed[nb];
    // every thread has read rv before anyone ORs in this row
    __syncthreads();
    if (!(rv & (1ULL << (i % kNmsBlock)))) {
      if (threadIdx.x == 0) {
        keep[lo + i] = 1;
      }
      const unsigned long long* p = mask + (lo + i) * col_blocks;
      for (int64_t j = nb + threadIdx.x; j < words; j += blockDim.x) {
        removed[j] |= p[j];
      }
      __syncthreads();
    }
  }
}

// [n * ceil(seg_len / 64)] suppression bitmasks of the sorted boxes, per segment of seg_len
// positions (nms_mask_kernel's layout; seg_len = n: one mask over all boxes).  groups may be undefined.
at::Tensor nms_masks(const at::Tensor& sorted_boxes, const at::Tensor& sorted_groups, double thr, int64_t seg_len) {
  const int64_t n = sorted_boxes.size(0);
  const int64_t col_blocks = (seg_len + kNmsBlock - 1) / kNmsBlock;
  const int64_t segments = (n + seg_len - 1) / seg_len;
  TORCH_CHECK(col_blocks <= 65535 && segments <= 65535, "mpirun_kit NMS: ", n, " boxes in segments of ", seg_len,
              " is more than one launch covers; lower pre_nms_top_n");
  auto mask = at::empty({n * col_blocks}, sorted_boxes.options().dtype(at::kLong));
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(col_blocks), static_cast<unsigned>(segments));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, sorted_boxes.scalar_type(), "mpirun_kit::nms_mask", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    nms_mask_kernel<scalar_t><<<grid, kNmsBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
        n, seg_len, static_cast<acc_t>(thr), sorted_boxes.data_ptr<scalar_t>(),
        sorted_groups.defined() ? sorted_groups.data_ptr<int64_t>() : nullptr,
        reinterpret_cast<unsigned long long*>(mask.data_ptr<int64_t>()));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return mask;
}

}  // namespace

at::Tensor nms_keep_mask_segments(const at::Tensor& sorted_boxes, const at::Tensor& sorted_groups, double thr,
                                  int64_t seg_len) {
  const int64_t n = sorted_boxes.size(0);
  auto keep = at::zeros({n}, sorted_boxes.options().dtype(at::kByte));
  if (n == 0) {
    return keep;
  }
  TORCH_CHECK(seg_len >= 1, "nms_keep_mask_segments: seg_len must be >= 1, got ", seg_len);
  const int64_t words = seg_len / kNmsBlock + 2;
  const size_t shmem = static_cast<size_t>(words) * sizeof(unsigned long long);
  TORCH_CHECK(shmem <= 48 * 1024, "generate_proposals_padded: ", seg_len,
              " boxes per image is more than one CUDA block can walk (393k); lower pre_nms_top_n");
  const auto mask = nms_masks(sorted_boxes, sorted_groups, thr, seg_len);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t segments = (n + seg_len - 1) / seg_len;
  nms_gather_keep_segments_kernel<<<static_cast<unsigned>(segments), 256, shmem, stream>>>(
      n, seg_len, reinterpret_cast<const unsigned long long*>(mask.data_ptr<int64_t>()), keep.data_ptr<uint8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return keep;
}

// Kept positions (into the sorted arrays), increasing.  `groups` may be undefined.
at::Tensor nms_sorted_positions(const at::Tensor& sorted_boxes, const at::Tensor& sorted_groups, double thr) {
  const int64_t n = sorted_boxes.size(0);
  auto long_opts = sorted_boxes.options().dtype(at::kLong);
  if (n == 0) {
    return at::empty({0}, long_opts);
  }
  const int64_t col_blocks = (n + kNmsBlock - 1) / kNmsBlock;
  const auto mask = nms_masks(sorted_boxes, sorted_groups, thr, n);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const size_t shmem = static_cast<size_t>(col_blocks) * sizeof(unsigned long long);
  if (shmem <= 48 * 1024) {
    auto keep = at::zeros({n}, sorted_boxes.options().dtype(at::kByte));
    nms_gather_keep_kernel<<<1, std::min<int64_t>(col_blocks, 1024), shmem, stream>>>(
        n, reinterpret_cast<const unsigned long long*>(mask.data_ptr<int64_t>()), keep.data_ptr<uint8_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return keep.nonzero().view(-1);
  }
  // Very large inputs (> 393k boxes): the removed row no longer fits in shared
  // memory, so walk the masks on the host.
  auto mask_cpu = mask.cpu();
  const auto* m = reinterpret_cast<const unsigned long long*>(mask_cpu.data_ptr<int64_t>());
  std::vector<unsigned long long> removed(col_blocks, 0);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t nb = i / kNmsBlock, ib = i % kNmsBlock;
    if (!(removed[nb] & (1ULL << ib))) {
      kept.push_back(i);
      const unsigned long long* p = m + i * col_blocks;
      for (int64_t j = nb; j < col_blocks; ++j) {
        removed[j] |= p[j];
      }
    }
  }
  return at::tensor(kept, at::TensorOptions().dtype(at::kLong)).to(sorted_boxes.device());
}

// Full NMS: sort, mask, greedy walk, map back; kept indices by decreasing
// score, ties by lower index (the CPU kernels' and references' order).
at::Tensor nms_indices(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& groups, double thr) {
  const int64_t n = boxes.size(0);
  if (n == 0) {
    return at::empty({0}, boxes.options().dtype(at::kLong));
  }
  // Stable: score descending, ties by index; then (stably) by group.
  auto order = std::get<1>(scores.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  at::Tensor sorted_groups;
  if (groups.defined()) {
    auto g = groups.index_select(0, order);
    auto by_group = std::get<1>(g.sort(/*stable=*/true, 0, /*descending=*/false));
    order = order.index_select(0, by_group);
    sorted_groups = g.index_select(0, by_group).contiguous();
  }
  auto sorted_boxes = boxes.index_select(0, order).contiguous();
  auto kept = order.index_select(0, nms_sorted_positions(sorted_boxes, sorted_groups, thr));
  if (groups.defined()) {
    // Back to one score-ordered list over all groups, ties by index.
    kept = std::get<0>(kept.sort());
    kept = kept.index_select(0, std::get<1>(scores.index_select(0, kept).sort(true, 0, true)));
  }
  return kept;
}

}  // namespace cuda
}  // namespace ops
}  // namespace mpirun_kit
