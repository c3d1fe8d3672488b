"""Ground-truth masks in their boxes' frames: rasterised small in the loader, resampled per RoI on the device.

Where it sits: ``coco.py`` (in the loader's workers) rasterises each instance's polygons straight
into a ``GT_MASK_SIZE`` x ``GT_MASK_SIZE`` grid spanning the instance's own box (an RLE instance is
decoded and cut out of its frame with ``resample_masks``), so a worker never builds, resizes or
ships a full-resolution mask: 12 KiB per instance instead of the ~1 MB an 800x1333 mask takes
through shared memory, pinning and the host-to-device copy.  The RoI heads then cut each mask-head
RoI's 28x28 target out of its GT's grid with ``resample_masks`` on the device, in the step: one
``grid_sample`` over all mask slots, fixed shapes, no host sync.  This is what the MLPerf TPU
Mask R-CNN does (instance masks cropped to their boxes and resized to 112x112 in the input
pipeline, targets cut per RoI in the model); NVIDIA's implementation rasterises the polygons per
RoI on the GPU instead.  ``crop_to_boxes`` turns full-frame masks (tests, benchmarks' in-memory
samples) into the same layout.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

#: side of the box-local GT mask grid (the TPU reference's ``gt_mask_size``): 4x the mask head's 28
GT_MASK_SIZE = 112


def resample_masks(masks: torch.Tensor, src_boxes: torch.Tensor, dst_boxes: torch.Tensor, size: int,
                   sampling: int = 2) -> torch.Tensor:
    """Binary masks [N, size, size] of each ``dst_boxes[i]``, read from ``masks[i]`` ([N, Hs, Ws]).

    ``masks[i]`` covers ``src_boxes[i]`` (x0, y0, x1, y1 in the common image frame; a pixel is a
    unit cell, as RoIAlign with ``aligned=True``); outside it reads 0.  Each output cell averages
    ``sampling`` x ``sampling`` bilinear samples (RoIAlign's sampling ratio) and is 1 where the
    average is >= 0.5.  Float32 on the masks' device; N may be 0.
    """
    n = masks.shape[0]
    k = size * sampling
    src = src_boxes.float()
    dst = dst_boxes.float()
    steps = (torch.arange(k, device=masks.device, dtype=torch.float32) + 0.5) / k  # [k] in (0, 1)
    # sample points in the image frame, then in the source box's normalised frame (-1..1, the
    # pixel edges: grid_sample with align_corners=False)
    xs = dst[:, 0:1] + steps[None, :] * (dst[:, 2:3] - dst[:, 0:1])  # [N, k]
    ys = dst[:, 1:2] + steps[None, :] * (dst[:, 3:4] - dst[:, 1:2])
    u = (xs - src[:, 0:1]) / (src[:, 2:3] - src[:, 0:1]).clamp(min=1e-6) * 2 - 1
    v = (ys - src[:, 1:2]) / (src[:, 3:4] - src[:, 1:2]).clamp(min=1e-6) * 2 - 1
    grid = torch.stack([u[:, None, :].expand(n, k, k), v[:, :, None].expand(n, k, k)], -1)
    out = F.grid_sample(masks[:, None].float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    if sampling > 1:
        out = F.avg_pool2d(out, sampling)
    return (out[:, 0] >= 0.5).float()


def crop_to_boxes(masks: torch.Tensor, boxes: torch.Tensor, size: int = GT_MASK_SIZE) -> torch.Tensor:
    """Full-frame masks [N, H, W] -> uint8 [N, size, size], each spanning its own box of ``boxes``."""
    h, w = masks.shape[-2:]
    frame = torch.tensor([[0.0, 0.0, float(w), float(h)]]).expand(masks.shape[0], 4)
    return resample_masks(masks, frame, boxes, size).to(torch.uint8)
