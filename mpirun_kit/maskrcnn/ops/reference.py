"""Pure-PyTorch reference implementations of every detection op.

They serve twice: as the fallback the public wrappers (ops/__init__.py) use when
the compiled extension cannot be loaded, and as the oracle the tests compare the
C++/CUDA kernels against.  So they favour being obviously correct over being
fast, and they pin down the semantics the kernels must reproduce:

* boxes are (x1, y1, x2, y2) in absolute coordinates, width = x2 - x1 (no +1);
* IoU is ``inter / (area_a + area_b - inter)`` in that order of operations, so a
  kernel that computes it the same way takes the same NMS decisions bit for bit;
* NMS suppresses a box when its IoU with a kept box is strictly greater than the
  threshold (NaN, from two zero-area boxes, never suppresses); ties in score are
  broken by the lower input index (a stable descending sort);
* roi_align follows Detectron / torchvision: bilinear samples on a regular grid
  per bin, ``aligned=True`` shifts by half a pixel, ``sampling_ratio=0`` uses
  ``ceil(roi_size / output_size)`` samples per bin.

No input checking happens here: the wrappers check once, before picking a backend.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .params import DEFAULT_CLIP, ProposalParams


# --------------------------------------------------------------------- boxes
def box_area(boxes: torch.Tensor) -> torch.Tensor:
    """Areas of [N, 4] boxes."""
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of a [N, 4] and b [M, 4] -> [N, M] (0/0 for two empty boxes gives NaN)."""
    area_a = box_area(a)
    area_b = box_area(b)
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def _iou_one_to_many(box: torch.Tensor, area: torch.Tensor, boxes: torch.Tensor, areas: torch.Tensor) -> torch.Tensor:
    # Same operation order as the C++ kernel: w*h / (area_i + area_j - inter).
    w = (torch.minimum(box[2], boxes[:, 2]) - torch.maximum(box[0], boxes[:, 0])).clamp(min=0)
    h = (torch.minimum(box[3], boxes[:, 3]) - torch.maximum(box[1], boxes[:, 1])).clamp(min=0)
    inter = w * h
    return inter / (area + areas - inter)


def _greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor | None, iou_threshold: float) -> torch.Tensor:
    order = torch.sort(scores, descending=True, stable=True).indices
    areas = box_area(boxes)
    keep: list[torch.Tensor] = []
    remaining = order
    # One iteration per kept box: the first remaining box is kept and suppresses
    # every later box that overlaps it by more than the threshold (same group only).
    while remaining.numel() > 0:
        i = remaining[0]
        keep.append(i)
        rest = remaining[1:]
        iou = _iou_one_to_many(boxes[i], areas[i], boxes[rest], areas[rest])
        suppress = iou > iou_threshold
        if idxs is not None:
            suppress &= idxs[rest] == idxs[i]
        remaining = rest[~suppress]
    if not keep:
        return torch.empty(0, dtype=torch.int64, device=boxes.device)
    return torch.stack(keep).to(torch.int64)


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the boxes kept by greedy NMS, sorted by decreasing score."""
    return _greedy_nms(boxes, scores, None, iou_threshold)


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float,
                max_keep: int = -1) -> torch.Tensor:
    """NMS applied independently per value of ``idxs``; kept indices sorted by decreasing score
    (the first ``max_keep`` of them when it is >= 0)."""
    keep = _greedy_nms(boxes, scores, idxs, iou_threshold)
    return keep if max_keep < 0 else keep[:max_keep]


def encode_boxes(reference_boxes: torch.Tensor, proposals: torch.Tensor, weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0)) -> torch.Tensor:
    """Regression targets (dx, dy, dw, dh) that turn ``proposals`` into ``reference_boxes``."""
    wx, wy, ww, wh = weights
    ex_w = proposals[:, 2] - proposals[:, 0]
    ex_h = proposals[:, 3] - proposals[:, 1]
    ex_cx = proposals[:, 0] + 0.5 * ex_w
    ex_cy = proposals[:, 1] + 0.5 * ex_h
    gt_w = reference_boxes[:, 2] - reference_boxes[:, 0]
    gt_h = reference_boxes[:, 3] - reference_boxes[:, 1]
    gt_cx = reference_boxes[:, 0] + 0.5 * gt_w
    gt_cy = reference_boxes[:, 1] + 0.5 * gt_h
    dx = wx * (gt_cx - ex_cx) / ex_w
    dy = wy * (gt_cy - ex_cy) / ex_h
    dw = ww * torch.log(gt_w / ex_w)
    dh = wh * torch.log(gt_h / ex_h)
    return torch.stack((dx, dy, dw, dh), dim=1)


def decode_boxes(
    deltas: torch.Tensor,
    boxes: torch.Tensor,
    weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
    clip_value: float = DEFAULT_CLIP,
) -> torch.Tensor:
    """Apply [N, 4K] deltas to [N, 4] boxes -> [N, 4K] boxes (K = classes; K = 1 for the RPN)."""
    wx, wy, ww, wh = weights
    boxes = boxes.to(deltas.dtype)
    w = boxes[:, 2] - boxes[:, 0]
    h = boxes[:, 3] - boxes[:, 1]
    cx = boxes[:, 0] + 0.5 * w
    cy = boxes[:, 1] + 0.5 * h
    dx = deltas[:, 0::4] / wx
    dy = deltas[:, 1::4] / wy
    dw = (deltas[:, 2::4] / ww).clamp(max=clip_value)
    dh = (deltas[:, 3::4] / wh).clamp(max=clip_value)
    pcx = dx * w[:, None] + cx[:, None]
    pcy = dy * h[:, None] + cy[:, None]
    pw = torch.exp(dw) * w[:, None]
    ph = torch.exp(dh) * h[:, None]
    out = torch.stack((pcx - 0.5 * pw, pcy - 0.5 * ph, pcx + 0.5 * pw, pcy + 0.5 * ph), dim=2)
    return out.reshape(deltas.shape)


def clip_boxes(boxes: torch.Tensor, height: float, width: float) -> torch.Tensor:
    """Clamp x to [0, width] and y to [0, height]."""
    x = boxes[:, 0::2].clamp(min=0, max=width)
    y = boxes[:, 1::2].clamp(min=0, max=height)
    return torch.stack((x[:, 0], y[:, 0], x[:, 1], y[:, 1]), dim=1)


# ------------------------------------------------------------------- anchors
def cell_anchors(sizes: Sequence[float], aspect_ratios: Sequence[float], dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """The A = len(ratios) * len(sizes) anchors centred on (0, 0), rounded to integers (torchvision order)."""
    # computed on the host (a handful of numbers), then one copy that does not make the host wait
    scales = torch.as_tensor(list(sizes), dtype=dtype)
    ratios = torch.as_tensor(list(aspect_ratios), dtype=dtype)
    h_ratios = torch.sqrt(ratios)
    w_ratios = 1 / h_ratios
    ws = (w_ratios[:, None] * scales[None, :]).reshape(-1)
    hs = (h_ratios[:, None] * scales[None, :]).reshape(-1)
    return (torch.stack([-ws, -hs, ws, hs], dim=1) / 2).round().to(device, non_blocking=True)


def grid_anchors(cell: torch.Tensor, height: int, width: int, stride: int) -> torch.Tensor:
    """Shift [A, 4] cell anchors over an H x W grid -> [H*W*A, 4], row-major locations, anchors innermost."""
    sx = torch.arange(width, device=cell.device, dtype=torch.int64).to(cell.dtype) * stride
    sy = torch.arange(height, device=cell.device, dtype=torch.int64).to(cell.dtype) * stride
    yy, xx = torch.meshgrid(sy, sx, indexing="ij")
    shifts = torch.stack((xx.reshape(-1), yy.reshape(-1), xx.reshape(-1), yy.reshape(-1)), dim=1)
    return (shifts[:, None, :] + cell[None, :, :]).reshape(-1, 4)


# ----------------------------------------------------------------- roi_align
def _axis_samples(start, bin_size, grid, pooled: int, max_grid: int, limit: int, dtype):
    """Sample coordinates along one axis plus their bilinear corners and weights.

    Returns (low, high, w_low, w_high), each [K, pooled, max_grid]; weights are
    zero for samples beyond the RoI's own grid (adaptive sampling gives each RoI
    its own count) and for samples outside [-1, limit] (torchvision's rule).
    """
    device = start.device
    p = torch.arange(pooled, device=device, dtype=dtype)
    g = torch.arange(max_grid, device=device, dtype=dtype)
    gsafe = grid.clamp(min=1).to(dtype)
    coord = start[:, None, None] + p[None, :, None] * bin_size[:, None, None] + (g[None, None, :] + 0.5) * bin_size[:, None, None] / gsafe[:, None, None]
    in_grid = g[None, None, :] < grid[:, None, None].to(dtype)
    coord = torch.where(in_grid, coord, torch.zeros((), dtype=dtype, device=device))
    valid = in_grid & (coord >= -1.0) & (coord <= limit)
    c = coord.clamp(min=0)
    low = c.to(torch.int64)  # c >= 0, so truncation is floor
    at_edge = low >= limit - 1
    high = torch.where(at_edge, torch.full_like(low, limit - 1), low + 1)
    low = torch.where(at_edge, torch.full_like(low, limit - 1), low)
    c = torch.where(at_edge, low.to(dtype), c)
    lw = c - low.to(dtype)
    hw = 1 - lw
    zero = torch.zeros((), dtype=dtype, device=device)
    return low, high, torch.where(valid, hw, zero), torch.where(valid, lw, zero)


def roi_align(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size: tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = -1,
    aligned: bool = False,
) -> torch.Tensor:
    """RoIAlign of [K, 5] rois (batch index, x1, y1, x2, y2) over [N, C, H, W] -> [K, C, oh, ow].

    Differentiable with respect to ``input`` (through PyTorch's own indexing
    backward); ``rois`` are treated as constants, as in the compiled op.
    """
    ph, pw = output_size
    k = rois.shape[0]
    n, c, height, width = input.shape
    dtype = input.dtype
    if k == 0:
        return input.new_zeros((0, c, ph, pw))
    rois = rois.detach()
    offset = 0.5 if aligned else 0.0
    batch = rois[:, 0].to(torch.int64)
    x1 = rois[:, 1] * spatial_scale - offset
    y1 = rois[:, 2] * spatial_scale - offset
    roi_w = rois[:, 3] * spatial_scale - offset - x1
    roi_h = rois[:, 4] * spatial_scale - offset - y1
    if not aligned:
        # Legacy (Detectron) behaviour: force malformed RoIs to be at least 1x1.
        roi_w = roi_w.clamp(min=1.0)
        roi_h = roi_h.clamp(min=1.0)
    bin_h = roi_h / ph
    bin_w = roi_w / pw
    if sampling_ratio > 0:
        grid_h = torch.full((k,), sampling_ratio, dtype=torch.int64, device=rois.device)
        grid_w = grid_h
    else:
        grid_h = torch.ceil(roi_h / ph).to(torch.int64)
        grid_w = torch.ceil(roi_w / pw).to(torch.int64)
    max_gh = max(int(grid_h.max()), 1)
    max_gw = max(int(grid_w.max()), 1)
    count = (grid_h * grid_w).clamp(min=1).to(dtype)

    yl, yh, wyl, wyh = _axis_samples(y1, bin_h, grid_h, ph, max_gh, height, dtype)
    xl, xh, wxl, wxh = _axis_samples(x1, bin_w, grid_w, pw, max_gw, width, dtype)
    # [K, C, ph, gh, pw, gw] gathers of the four bilinear corners.
    bi = batch[:, None, None, None, None, None]
    ci = torch.arange(c, device=input.device)[None, :, None, None, None, None]

    def corner(yy: torch.Tensor, xx: torch.Tensor) -> torch.Tensor:
        return input[bi, ci, yy[:, None, :, :, None, None], xx[:, None, None, None, :, :]]

    def w(wy: torch.Tensor, wx: torch.Tensor) -> torch.Tensor:
        return wy[:, None, :, :, None, None] * wx[:, None, None, None, :, :]

    val = w(wyl, wxl) * corner(yl, xl) + w(wyl, wxh) * corner(yl, xh) + w(wyh, wxl) * corner(yh, xl) + w(wyh, wxh) * corner(yh, xh)
    return val.sum(dim=(3, 5)) / count[:, None, None, None]


def fpn_levels(rois: torch.Tensor, num_levels: int, canonical_scale: float = 224.0, canonical_level: int = 4, min_level: int = 2) -> torch.Tensor:
    """FPN eq. (1): level index (0 = finest) of each [K, 5] RoI, clamped to the available levels."""
    s = torch.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
    # eps as a Python float: a device scalar built from host data would be a synchronous copy
    lvl = torch.floor(canonical_level + torch.log2(s / canonical_scale) + 1e-6)
    lvl = lvl.clamp(min=min_level, max=min_level + num_levels - 1)
    return lvl.to(torch.int64) - min_level


def multiscale_roi_align(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    output_size: tuple[int, int],
    sampling_ratio: int,
    strides: Sequence[int],
    canonical_scale: float = 224.0,
    canonical_level: int = 4,
    aligned: bool = False,
    roi_align_fn=None,
) -> torch.Tensor:
    """Pool each RoI from its FPN level, return them in input order -> [K, C, oh, ow]."""
    fn = roi_align_fn or roi_align
    min_level = int(round(math.log2(strides[0])))
    levels = fpn_levels(rois, len(features), canonical_scale, canonical_level, min_level)
    outs, idxs = [], []
    for lvl, (feat, stride) in enumerate(zip(features, strides)):
        idx = torch.nonzero(levels == lvl).flatten()
        outs.append(fn(feat, rois[idx], output_size, 1.0 / stride, sampling_ratio, aligned))
        idxs.append(idx)
    order = torch.cat(idxs)
    # Gather back through the inverse permutation: autograd-friendly, no in-place writes.
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return torch.cat(outs)[inverse]


# ----------------------------------------------------------------- proposals
def _topk_stable(scores: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sort(scores, descending=True, stable=True).indices[:k]


def generate_proposals(
    anchors: torch.Tensor,
    objectness: torch.Tensor,
    deltas: torch.Tensor,
    image_sizes: Sequence[tuple[int, int]],
    params: ProposalParams,
    levels: torch.Tensor | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The RPN proposal step per image: top-k, decode, clip, min-size filter, NMS, top-k.

    ``params``: ``ops.params.ProposalParams`` (counts, thresholds, box-coder settings).

    With ``levels`` ([A] level id per anchor) the pre-NMS top-k is taken per level
    and NMS runs per level (torchvision's RPN); without it, over all anchors.
    Returns per image the boxes [k, 4] and their objectness values [k] (as given,
    i.e. logits if logits were passed), sorted by decreasing objectness.
    """
    pre_nms_top_n, post_nms_top_n, nms_thresh, min_size = (params.pre_nms_top_n, params.post_nms_top_n,
                                                           params.nms_thresh, params.min_size)
    weights, clip_value = params.weights, params.clip_value
    boxes_out, scores_out = [], []
    for b, (h, w) in enumerate(image_sizes):
        obj = objectness[b]
        if levels is None:
            sel = _topk_stable(obj, pre_nms_top_n)
        else:
            parts = []
            for lvl in torch.unique(levels).tolist():
                in_lvl = torch.nonzero(levels == lvl).flatten()
                parts.append(in_lvl[_topk_stable(obj[in_lvl], pre_nms_top_n)])
            sel = torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64, device=obj.device)
        boxes = decode_boxes(deltas[b, sel], anchors[sel], weights, clip_value)
        boxes = clip_boxes(boxes, float(h), float(w))
        scores = obj[sel]
        keep = torch.nonzero(((boxes[:, 2] - boxes[:, 0]) >= min_size) & ((boxes[:, 3] - boxes[:, 1]) >= min_size)).flatten()
        boxes, scores = boxes[keep], scores[keep]
        if levels is None:
            keep = nms(boxes, scores, nms_thresh)
        else:
            keep = batched_nms(boxes, scores, levels[sel][keep], nms_thresh)
        keep = keep[:post_nms_top_n]
        boxes_out.append(boxes[keep])
        scores_out.append(scores[keep])
    return boxes_out, scores_out


def generate_proposals_padded(
    anchors: torch.Tensor,
    objectness: torch.Tensor,
    deltas: torch.Tensor,
    image_sizes: Sequence[tuple[int, int]],
    params: ProposalParams,
    levels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``generate_proposals`` padded: boxes [B, post, 4], scores [B, post], valid [B, post]."""
    boxes_l, scores_l = generate_proposals(anchors, objectness, deltas, image_sizes, params, levels)
    post_nms_top_n = params.post_nms_top_n
    b = len(boxes_l)
    boxes = anchors.new_zeros((b, post_nms_top_n, 4))
    scores = objectness.new_zeros((b, post_nms_top_n))
    valid = torch.zeros((b, post_nms_top_n), dtype=torch.bool, device=anchors.device)
    for i, (bx, sc) in enumerate(zip(boxes_l, scores_l)):
        boxes[i, :bx.shape[0]] = bx
        scores[i, :sc.shape[0]] = sc
        valid[i, :sc.shape[0]] = True
    return boxes, scores, valid
