"""Mask R-CNN meta-architecture: list of samples -> losses (training) or detections (eval).

Takes the padded batch the DataLoader's collate built (data/batch.py; already on the model's device,
or a list of samples that it collates itself), normalises the uint8 canvas (the padding reads as
the mean colour), runs backbone -> FPN -> RPN -> RoI heads, and in eval maps detections back to
each image's original size.  ``build_model`` is the only
constructor the trainer uses; the small demo variant is the same code with a different config.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..config import ModelConfig
from ..data.batch import TARGET_KEYS, collate, is_batch, to_device
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

    def preprocess(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """The collated uint8 canvas (already on the device) -> normalised float images.

        Where the loader shipped images as decoded (``src_sizes``/``flips`` in the batch), each is
        resized (bilinear with antialiasing, as PIL's resize) and flipped here, on the device: a
        few kernels per image instead of most of a loader worker's time.  The padding reads as the
        mean colour (0 after normalisation), as the pretrained backbone expects; every slice uses
        the host-side sizes, so nothing is read from the device.
        """
        sizes = batch["image_sizes"]
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        if "src_sizes" in batch:
            # per image, on its decoded pixels: normalise (one kernel: x / std - mean / std, which
            # commutes with the resize, whose weights sum to 1, and with the flip), flip, resize, then
            # one copy into the canvas, allocated in the backbone's layout; the canvas's zeros are
            # the mean colour already, so nothing of the canvas is touched twice
            ph, pw = batch["canvas"]
            src = batch["images"]
            images = torch.empty((src.shape[0], 3, ph, pw), dtype=torch.float32, device=src.device,
                                 memory_format=fmt).zero_()
            scale = self.pixel_std.reciprocal()
            shift = -self.pixel_mean * scale
            for i, ((h, w), (sh, sw), flip) in enumerate(zip(sizes, batch["src_sizes"], batch["flips"])):
                x = torch.addcmul(shift, src[i, :, :sh, :sw], scale)
                if flip:
                    x = x.flip(-1)
                if (sh, sw) != (h, w):
                    x = F.interpolate(x[None], size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0]
                images[i, :, :h, :w] = x
            return images
        # in place on the fresh float copy: no further canvas-sized temporaries
        images = batch["images"].float().sub_(self.pixel_mean).div_(self.pixel_std)
        ph, pw = images.shape[-2:]
        for i, (h, w) in enumerate(sizes):
            if h < ph:
                images[i, :, h:, :] = 0
            if w < pw:
                images[i, :, :, w:] = 0
        if self.channels_last:
            images = images.contiguous(memory_format=fmt)
        return images

    def forward(self, batch: Mapping[str, Any] | Sequence[Mapping[str, Any]]):
        """A collated batch on this model's device (data/batch.py), or a list of samples (collated here)."""
        if not is_batch(batch):
            batch = collate(batch, self.size_divisibility)
        batch = to_device(batch, self.device)  # a no-op for the trainer's batch, already moved once
        images = self.preprocess(batch)
        sizes = [tuple(s) for s in batch["image_sizes"]]
        feats = self.fpn(self.backbone(images))
        if self.training:
            targets = {k: batch[k] for k in TARGET_KEYS}
            proposals, losses = self.rpn(feats, sizes, targets)
            losses.update(self.roi_heads.forward_train(feats, proposals, targets))
            return losses
        proposals, _ = self.rpn(feats, sizes)
        dets = self.roi_heads.forward_test(feats, proposals, sizes)
        return [detector_postprocess(d, sz, m["orig_size"]) | {"image_id": m["image_id"]}
                for d, sz, m in zip(dets, sizes, batch["meta"])]


def build_model(cfg: ModelConfig, size_divisibility: int = 32) -> MaskRCNN:
    return MaskRCNN(cfg, size_divisibility)
