"""Matching and subsampling shared by the RPN and the RoI heads (pure tensor functions).

Random choices draw from a generator seeded per image (the sampler's item seed), so the samples an
image gets do not depend on which rank sees it or on what ran before: a DDP step equals a
single-process step on the same global batch, and a resumed run draws what an uninterrupted one
would.
"""
from __future__ import annotations

import torch


def match(iou: torch.Tensor, fg_thresh: float, bg_thresh: float, allow_low_quality: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Assign each prediction (column of ``iou`` [G, P]) to its best GT.

    Returns:
        (matched gt index [P], label [P]) with label 1 = foreground (IoU >= fg_thresh),
        0 = background (IoU < bg_thresh), -1 = ignored (in between).  With ``allow_low_quality``
        each GT's best predictions are foreground too, so no GT is left without one.
    """
    num_pred = iou.shape[1]
    if iou.shape[0] == 0:
        return (torch.zeros(num_pred, dtype=torch.int64, device=iou.device),
                torch.zeros(num_pred, dtype=torch.int8, device=iou.device))
    vals, idx = iou.max(dim=0)
    labels = torch.full((num_pred,), -1, dtype=torch.int8, device=iou.device)
    labels[vals < bg_thresh] = 0
    labels[vals >= fg_thresh] = 1
    if allow_low_quality:
        best = iou.max(dim=1, keepdim=True).values
        # (gt, pred) pairs that reach their gt's best IoU; a gt with IoU 0 everywhere gets none
        _, preds = torch.nonzero((iou == best) & (best > 0), as_tuple=True)
        labels[preds] = 1
    return idx, labels


def subsample(labels: torch.Tensor, batch_size: int, positive_fraction: float,
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Randomly pick up to ``batch_size`` predictions, at most ``positive_fraction`` foreground.

    Returns:
        (positive indices, negative indices).
    """
    pos = torch.nonzero(labels == 1).flatten()
    neg = torch.nonzero(labels == 0).flatten()
    num_pos = min(pos.numel(), int(batch_size * positive_fraction))
    num_neg = min(neg.numel(), batch_size - num_pos)
    pos = pos[torch.randperm(pos.numel(), generator=generator)[:num_pos].to(pos.device)]
    neg = neg[torch.randperm(neg.numel(), generator=generator)[:num_neg].to(neg.device)]
    return pos, neg


def image_generator(seed: int, salt: int) -> torch.Generator:
    """A CPU generator for one image and one consumer (``salt``: 0 = RPN, 1 = RoI heads)."""
    return torch.Generator().manual_seed(int(seed) * 4 + salt)
