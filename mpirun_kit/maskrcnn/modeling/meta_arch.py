"""Mask R-CNN meta-architecture: list of samples -> losses (training) or detections (eval).

Normalises and pads the images to one batch tensor (size divisible by 32, padding after
normalisation so it reads as the mean colour), runs backbone -> FPN -> RPN -> RoI heads, and in
eval maps detections back to each image's original size.  ``build_model`` is the only
constructor the trainer uses; the small demo variant is the same code with a different config.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..config import ModelConfig
from .backbone import ResNet
from .fpn import FPN
from .postprocess import detector_postprocess
from .roi_heads import RoIHeads
from .rpn import RPN


class MaskRCNN(nn.Module):
    def __init__(self, cfg: ModelConfig, size_divisibility: int = 32):
        super().__init__()
        self.cfg = cfg
        self.size_divisibility = size_divisibility
        self.backbone = ResNet(cfg.backbone)
        self.fpn = FPN(self.backbone.out_channels, cfg.fpn_channels)
        self.rpn = RPN(cfg.rpn, cfg.fpn_channels)
        self.roi_heads = RoIHeads(cfg.roi_heads, cfg.fpn_channels, cfg.num_classes)
        self.register_buffer("pixel_mean", torch.tensor(cfg.pixel_mean).view(3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(cfg.pixel_std).view(3, 1, 1), persistent=False)
        self.channels_last = False

    @property
    def device(self) -> torch.device:
        return self.pixel_mean.device

    def preprocess(self, samples: list[dict[str, Any]]) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        sizes = [tuple(s["image"].shape[-2:]) for s in samples]
        d = self.size_divisibility
        ph = int(math.ceil(max(h for h, _ in sizes) / d) * d)
        pw = int(math.ceil(max(w for _, w in sizes) / d) * d)
        batch = torch.zeros((len(samples), 3, ph, pw), device=self.device)
        for i, s in enumerate(samples):
            img = s["image"].to(self.device, non_blocking=True).float()
            h, w = img.shape[-2:]
            batch[i, :, :h, :w] = (img - self.pixel_mean) / self.pixel_std
        if self.channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch, sizes

    def forward(self, samples: list[dict[str, Any]]):
        images, sizes = self.preprocess(samples)
        feats = self.fpn(self.backbone(images))
        if self.training:
            targets = pad_targets(samples, self.device)
            proposals, losses = self.rpn(feats, sizes, targets)
            losses.update(self.roi_heads.forward_train(feats, proposals, targets))
            return losses
        proposals, _ = self.rpn(feats, sizes)
        dets = self.roi_heads.forward_test(feats, proposals, sizes)
        return [detector_postprocess(d, sz, s["orig_size"]) | {"image_id": s["image_id"]}
                for d, sz, s in zip(dets, sizes, samples)]


def pad_targets(samples: list[dict[str, Any]], device: torch.device) -> dict[str, torch.Tensor]:
    """Per-image targets (host tensors from the loader) -> one padded batch on ``device``.

    boxes [B, G, 4], labels [B, G], valid [B, G] (G = the most boxes of any image, >= 1), seeds [B],
    and every GT mask in one [1 + sum G_i, H, W] uint8 tensor (row 0 all zero, for padding; H, W the
    largest mask) with mask_rows [B, G] pointing into it.  Built on the host, where the sizes are
    known, then copied without making the host wait (pinned + non_blocking on CUDA).
    """
    b = len(samples)
    counts = [int(s["boxes"].shape[0]) for s in samples]
    g = max(1, *counts)
    boxes = torch.zeros((b, g, 4))
    labels = torch.zeros((b, g), dtype=torch.int64)
    valid = torch.zeros((b, g), dtype=torch.bool)
    rows = torch.zeros((b, g), dtype=torch.int64)
    mh = max(int(s["masks"].shape[-2]) for s in samples)
    mw = max(int(s["masks"].shape[-1]) for s in samples)
    masks = torch.zeros((1 + sum(counts), mh, mw), dtype=torch.uint8)
    row = 1
    for i, (s, n) in enumerate(zip(samples, counts)):
        boxes[i, :n] = s["boxes"].float()
        labels[i, :n] = s["labels"]
        valid[i, :n] = True
        rows[i, :n] = torch.arange(row, row + n)
        masks[row:row + n, :s["masks"].shape[-2], :s["masks"].shape[-1]] = s["masks"]
        row += n
    seeds = torch.tensor([int(s.get("seed", 0)) for s in samples], dtype=torch.int64)
    out = {"boxes": boxes, "labels": labels, "valid": valid, "mask_rows": rows, "masks": masks, "seeds": seeds}
    if device.type == "cuda":
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in out.items()}
    return {k: v.to(device, non_blocking=True) for k, v in out.items()}


def build_model(cfg: ModelConfig, size_divisibility: int = 32) -> MaskRCNN:
    return MaskRCNN(cfg, size_divisibility)
