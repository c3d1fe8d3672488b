// Bitmask NMS on the GPU, shared by the nms, batched_nms and generate_proposals kernels.
//
// Boxes are sorted (by group, then by decreasing score, ties by index); one
// CUDA block compares a 64-box row block with a 64-box column block and writes,
// for each row box, a 64-bit mask of the column boxes it suppresses.  Block
// pairs whose groups cannot overlap write zeros at once.  A single block then
// walks the masks greedily on the GPU (no copy of the masks to the host when
// the per-box "removed" row fits in shared memory).  Same decisions as the CPU:
// IoU > threshold in the box dtype's opmath type, only within one group.
//
// Declared here, defined once in nms_impl.cu: the kernels are not templates on
// every path, so defining them in this header put one copy in every .cu that
// includes it, and the link failed with multiple definitions.
#pragma once

#include <ATen/ATen.h>

namespace mpirun_kit {
namespace ops {
namespace cuda {

// Kept positions (into the sorted arrays), increasing.  `sorted_groups` may be undefined.
at::Tensor nms_sorted_positions(const at::Tensor& sorted_boxes, const at::Tensor& sorted_groups, double thr);

// Keep flags (uint8 [n], 1 = kept) for sorted boxes cut into segments of seg_len
// consecutive positions that share no group (e.g. one segment per image): the masks are
// built per segment (n * ceil(seg_len / 64) words, not n * ceil(n / 64)), one CUDA
// block walks each segment, nothing is read back to the host.
at::Tensor nms_keep_mask_segments(const at::Tensor& sorted_boxes, const at::Tensor& sorted_groups, double thr,
                                  int64_t seg_len);

// Full NMS: sort, mask, greedy walk, map back; kept indices by decreasing
// score, ties by lower index (the CPU kernels' and references' order).
at::Tensor nms_indices(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& groups, double thr);

}  // namespace cuda
}  // namespace ops
}  // namespace mpirun_kit
