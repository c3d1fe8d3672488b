"""Inference post-processing: detections in the resized, padded frame -> the original image.

Boxes are rescaled to the original size; each 28x28 mask probability map is pasted into its box
of a full-size canvas by bilinear sampling (``paste_masks``, as separable matmuls) and thresholded
at 0.5, which is what COCO segm evaluation scores.
"""
from __future__ import annotations

import torch

#: cap on elements of one chunk's probability maps (N x H x W float32); bounds memory at 800x1333 x 100
_PASTE_CHUNK = 1 << 25


def _axis_weights(lo: torch.Tensor, hi: torch.Tensor, length: int, m: int) -> torch.Tensor:
    """[N, length, m]: bilinear weights of the m mask cells for each pixel along one axis.

    The pixel centre is mapped into the box's [-1, 1] frame and from there to a source position as
    ``grid_sample(align_corners=False)`` does; cells outside 0..m-1 get no weight (its zero
    padding).  Each row has at most two non-zero weights.
    """
    centre = torch.arange(length, device=lo.device, dtype=torch.float32) + 0.5
    g = (centre[None] - lo) / (hi - lo).clamp(min=1e-6) * 2 - 1
    src = ((g + 1) * m - 1) / 2
    # the bilinear "hat": cell k weighs max(0, 1 - |src - k|), i.e. 1 - frac and frac for the two
    # cells around src
    cells = torch.arange(m, device=lo.device, dtype=torch.float32)
    return (1 - (src[..., None] - cells).abs()).clamp_(min=0)


def paste_probs(masks: torch.Tensor, boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[N, M, M] probabilities + [N, 4] boxes (image coords) -> [N, H, W] float32 probabilities.

    Bilinear sampling is separable, so each map is ``Wy @ mask @ Wx^T`` with the per-axis weights
    of ``_axis_weights``: two batched matmuls instead of a ``grid_sample`` over a full-size
    [N, H, W, 2] grid (which cost more to build than to sample: issue #32).  Equal to
    ``grid_sample(mask, grid, align_corners=False)`` up to float rounding (at most four non-zero
    terms per pixel).
    """
    b = boxes.float()
    m = masks.shape[-1]
    wy = _axis_weights(b[:, 1, None], b[:, 3, None], height, m)
    wx = _axis_weights(b[:, 0, None], b[:, 2, None], width, m)
    return torch.bmm(torch.bmm(wy, masks.float()), wx.transpose(1, 2))


def paste_masks(masks: torch.Tensor, boxes: torch.Tensor, height: int, width: int,
                threshold: float = 0.5) -> torch.Tensor:
    """[N, M, M] probabilities + [N, 4] boxes (image coords) -> [N, H, W] bool masks (>= threshold)."""
    n = masks.shape[0]
    out = torch.empty((n, height, width), dtype=torch.bool, device=masks.device)
    step = max(1, _PASTE_CHUNK // max(height * width, 1))
    for s in range(0, n, step):
        torch.ge(paste_probs(masks[s:s + step], boxes[s:s + step], height, width), threshold, out=out[s:s + step])
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
