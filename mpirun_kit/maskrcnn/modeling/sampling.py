"""Matching and subsampling shared by the RPN and the RoI heads: batched, fixed-size, sync-free.

Data flow: the RPN (anchors x padded GT boxes) and the RoI heads (padded proposals + GT x padded GT)
give a batched IoU [B, G, P] -> ``match`` labels every prediction -> ``subsample`` picks a fixed
number of slots per image -> the heads compute their losses on those slots, weighting invalid ones
by zero.  Every shape here is known on the host before the step runs, so nothing reads a device
value back (tests/maskrcnn/test_maskrcnn_syncs.py holds that): no ``nonzero``, no boolean-mask
indexing, no ``randperm`` on the CPU.

The mask head trains on the foreground only: ``gather_foreground`` pools the sampled foreground
slots of every image of the batch and keeps a fixed number of them (the cap), a random subset
when there are more, so its slots follow the foreground actually present instead of a fixed
prefix per image.

Randomness is a counter-based hash of (image seed, consumer, prediction index), so the samples an
image gets do not depend on which rank sees it, on the device, or on what ran before: a DDP step
equals a single-process step on the same global batch, and a resumed run draws what an
uninterrupted one would.  Sampling "k at random" is ``topk`` over those keys.
"""
from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    # a 32-bit integer hash (two multiply-xorshift rounds) in int64 arithmetic: every product stays
    # below 2**59, so it is exact and identical on every device
    x = ((x ^ (x >> 16)) * 0x045D9F3B) & _MASK32
    x = ((x ^ (x >> 16)) * 0x045D9F3B) & _MASK32
    return x ^ (x >> 16)


def random_keys(seeds: torch.Tensor, n: int, salt: int) -> torch.Tensor:
    """[B, n] distinct non-negative int64 keys, a pure function of (seeds[b], salt, index).

    The low 24 bits are the index itself, so keys never tie (topk is deterministic).
    """
    s = _mix32((seeds.to(torch.int64) * 4 + salt) & _MASK32)
    i = torch.arange(n, device=seeds.device, dtype=torch.int64)
    h = _mix32((s[:, None] + _mix32(i)[None, :]) & _MASK32)
    return (h << 24) | (i & 0xFFFFFF)


def batched_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of a [B, G, 4] x b [B, P, 4] -> [B, G, P] (same arithmetic as ops.reference.box_iou)."""
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    lt = torch.maximum(a[:, :, None, :2], b[:, None, :, :2])
    rb = torch.minimum(a[:, :, None, 2:], b[:, None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, :, None] + area_b[:, None, :] - inter)


def match(iou: torch.Tensor, gt_valid: torch.Tensor, fg_thresh: float, bg_thresh: float,
          allow_low_quality: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Assign each prediction (column of ``iou`` [B, G, P]) to its best valid GT.

    Args:
        gt_valid: [B, G] False for the padding rows of images with fewer than G boxes.

    Returns:
        (matched gt index [B, P], label [B, P] int8) with label 1 = foreground (IoU >= fg_thresh),
        0 = background (IoU < bg_thresh, or an image without GT), -1 = ignored (in between).  With
        ``allow_low_quality`` each GT's best predictions are foreground too.
    """
    iou = torch.where(gt_valid[:, :, None], iou, torch.full((), -1.0, dtype=iou.dtype, device=iou.device))
    vals, idx = iou.max(dim=1)
    labels = torch.full_like(idx, -1, dtype=torch.int8)
    labels = torch.where(vals < bg_thresh, torch.zeros_like(labels), labels)
    labels = torch.where(vals >= fg_thresh, torch.ones_like(labels), labels)
    if allow_low_quality:
        best = iou.max(dim=2, keepdim=True).values
        # (gt, pred) pairs that reach their gt's best IoU; a gt with IoU 0 everywhere gets none
        low = ((iou == best) & (best > 0)).any(dim=1)
        labels = torch.where(low, torch.ones_like(labels), labels)
    return idx, labels


def subsample(labels: torch.Tensor, batch_size: int, positive_fraction: float, seeds: torch.Tensor,
              salt: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pick up to ``batch_size`` predictions per image at random, at most ``positive_fraction`` fg.

    Args:
        labels: [B, P] from ``match`` (1 fg, 0 bg, -1 ignored).
        seeds: [B] per-image seeds; ``salt`` tells consumers apart (0 = RPN, 1 = RoI heads).

    Returns:
        (index [B, S], is_foreground [B, S], valid [B, S]) with S = min(batch_size, P): the
        foreground picks first, then the background ones; slots past the image's sample count are
        invalid (their index is a harmless 0).
    """
    b, p = labels.shape
    s = min(batch_size, p)
    max_pos = min(int(batch_size * positive_fraction), p)
    keys = random_keys(seeds, p, salt)
    none = torch.full((), -1, dtype=keys.dtype, device=keys.device)
    slot = torch.arange(s, device=labels.device)
    pos_key, pos_idx = torch.where(labels == 1, keys, none).topk(max(max_pos, 1), dim=1)
    neg_key, neg_idx = torch.where(labels == 0, keys, none).topk(s, dim=1)
    num_pos = (pos_key[:, :max_pos] >= 0).sum(1, keepdim=True)  # [B, 1]
    num_neg = torch.minimum((neg_key >= 0).sum(1, keepdim=True), s - num_pos)
    is_pos = slot[None, :] < num_pos
    from_neg = (slot[None, :] - num_pos).clamp(min=0)
    index = torch.where(is_pos, pos_idx.gather(1, slot[None, :].clamp(max=pos_idx.shape[1] - 1).expand(b, s)),
                        neg_idx.gather(1, from_neg))
    valid = slot[None, :] < num_pos + num_neg
    return index, is_pos, valid


def gather_foreground(is_pos: torch.Tensor, seeds: torch.Tensor, cap: int,
                      salt: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``cap`` foreground slots out of the whole batch, on the device, in fixed shapes.

    Args:
        is_pos: [B, S] foreground flags of the sampled slots (``subsample``: foreground first).
        seeds: [B] per-image seeds; ``salt`` tells this draw from the sampler's.
        cap: how many slots the batch gets (fixed, so the step has fixed shapes); at most B * S
            are returned.

    Returns:
        (flat slot index [C] into [B * S], image index [C], valid [C]), C = min(cap, B * S).  Every foreground
        slot ranks above every other one and the foreground ranks among itself by a random key, so
        with more foreground than ``cap`` the picks are a random subset of it (any image's) and with
        fewer, all of it plus invalid padding slots (their index points at a harmless slot).
    """
    b, s = is_pos.shape
    n = b * s
    flat = torch.arange(n, device=is_pos.device, dtype=torch.int64)
    # the hash's 32 bits above a unique index: a random order with no ties, the same on every device
    keys = ((random_keys(seeds, s, salt) >> 24) << 24).reshape(-1) | flat
    none = torch.full((), -1, dtype=keys.dtype, device=keys.device)
    top, pick = torch.where(is_pos.reshape(-1), keys, none).topk(min(cap, n))
    return pick, torch.div(pick, s, rounding_mode="floor"), top >= 0
