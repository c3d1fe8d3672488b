"""Inference post-processing: detections in the resized, padded frame -> the original image.

Boxes are rescaled to the original size; each 28x28 mask probability map is pasted into its box
of a full-size canvas by bilinear sampling (``paste_masks``) and thresholded at 0.5, which is
what COCO segm evaluation scores.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

#: cap on elements of one grid_sample call (N x H x W); bounds memory at 800x1333 x 100 detections
_PASTE_CHUNK = 1 << 25


def paste_masks(masks: torch.Tensor, boxes: torch.Tensor, height: int, width: int,
                threshold: float = 0.5) -> torch.Tensor:
    """[N, M, M] probabilities + [N, 4] boxes (image coords) -> [N, H, W] bool masks."""
    n = masks.shape[0]
    out = torch.zeros((n, height, width), dtype=torch.bool, device=masks.device)
    if n == 0:
        return out
    ys = torch.arange(height, device=masks.device, dtype=torch.float32) + 0.5
    xs = torch.arange(width, device=masks.device, dtype=torch.float32) + 0.5
    step = max(1, _PASTE_CHUNK // max(height * width, 1))
    for s in range(0, n, step):
        b = boxes[s:s + step].float()
        x0, y0, x1, y1 = (b[:, i, None] for i in range(4))
        # pixel centre -> [-1, 1] in the box's frame (align_corners=False convention)
        gx = (xs[None] - x0) / (x1 - x0).clamp(min=1e-6) * 2 - 1
        gy = (ys[None] - y0) / (y1 - y0).clamp(min=1e-6) * 2 - 1
        grid = torch.stack([gx[:, None, :].expand(-1, height, -1), gy[:, :, None].expand(-1, -1, width)], -1)
        sampled = F.grid_sample(masks[s:s + step, None].float(), grid, align_corners=False)[:, 0]
        out[s:s + step] = sampled >= threshold
    return out


def detector_postprocess(det: dict[str, torch.Tensor], resized: tuple[int, int],
                         orig: tuple[int, int]) -> dict[str, torch.Tensor]:
    """Scale one image's detections from the resized frame back to ``orig`` = (h, w)."""
    (rh, rw), (oh, ow) = resized, orig
    boxes = det["boxes"] * torch.tensor([ow / rw, oh / rh, ow / rw, oh / rh], device=det["boxes"].device)
    boxes[:, 0::2] = boxes[:, 0::2].clamp(0, ow)
    boxes[:, 1::2] = boxes[:, 1::2].clamp(0, oh)
    return {"boxes": boxes, "scores": det["scores"], "labels": det["labels"],
            "masks": paste_masks(det["mask_probs"], boxes, oh, ow)}
