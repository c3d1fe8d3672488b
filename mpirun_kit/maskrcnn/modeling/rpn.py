"""Region Proposal Network: P2..P6 features -> per-image proposals (+ RPN losses in training).

A shared 3x3 conv head predicts, at every location of every level, an objectness logit and 4
box deltas for each of A anchors (one size per level x the aspect ratios).  Proposals come from
the ops package's fused ``generate_proposals`` (per-level pre-NMS top-k, decode, clip, NMS per
level, post-NMS top-k per image).  Training labels anchors by IoU with the GT boxes (>= 0.7 fg,
< 0.3 bg, each GT's best anchors fg), samples 256 per image at half foreground, and applies
binary cross-entropy + L1 box loss, each image's sums normalised by its number of sampled anchors
and averaged over images (so the loss of a batch split across DDP ranks averages to the loss of
the whole batch).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..config import RPNConfig
from ..ops import box_iou, encode_boxes, generate_anchors, generate_proposals
from .fpn import STRIDES
from .sampling import image_generator, match, subsample


class RPN(nn.Module):
    def __init__(self, cfg: RPNConfig, in_channels: int):
        super().__init__()
        self.cfg = cfg
        self.num_anchors = len(cfg.aspect_ratios)
        self.conv = nn.Conv2d(in_channels, in_channels, 3, padding=1)
        self.objectness = nn.Conv2d(in_channels, self.num_anchors, 1)
        self.deltas = nn.Conv2d(in_channels, 4 * self.num_anchors, 1)
        for m in (self.conv, self.objectness, self.deltas):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)
        self._anchor_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def anchors(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """All anchors [A_total, 4] (levels concatenated) and their level ids [A_total]."""
        sizes = tuple(tuple(f.shape[-2:]) for f in feats)
        key = (sizes, feats[0].device)
        if key not in self._anchor_cache:
            per_level = generate_anchors(list(sizes), list(STRIDES[:len(feats)]),
                                         [(s,) for s in self.cfg.anchor_sizes], list(self.cfg.aspect_ratios),
                                         feats[0].device)
            levels = torch.cat([torch.full((a.shape[0],), i, dtype=torch.int64, device=a.device)
                                for i, a in enumerate(per_level)])
            self._anchor_cache = {key: (torch.cat(per_level).float(), levels)}  # keep one shape only
        return self._anchor_cache[key]

    def forward(self, feats: list[torch.Tensor], image_sizes: list[tuple[int, int]],
                gt_boxes: list[torch.Tensor] | None = None, seeds: list[int] | None = None) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        logits, deltas = [], []
        for f in feats:
            t = F.relu(self.conv(f))
            b = f.shape[0]
            # [B, A, H, W] -> [B, H*W*A]: locations row-major, anchors innermost (the anchor order)
            logits.append(self.objectness(t).permute(0, 2, 3, 1).reshape(b, -1))
            deltas.append(self.deltas(t).view(b, self.num_anchors, 4, *t.shape[-2:])
                          .permute(0, 3, 4, 1, 2).reshape(b, -1, 4))
        logits_all = torch.cat(logits, 1).float()
        deltas_all = torch.cat(deltas, 1).float()
        anchors, levels = self.anchors(feats)
        training = gt_boxes is not None
        with torch.no_grad():
            proposals, _ = generate_proposals(
                anchors, logits_all.detach(), deltas_all.detach(), image_sizes,
                self.cfg.pre_nms_topk_train if training else self.cfg.pre_nms_topk_test,
                self.cfg.post_nms_topk_train if training else self.cfg.post_nms_topk_test,
                self.cfg.nms_thresh, self.cfg.min_size, levels=levels)
        if not training:
            return proposals, {}
        return proposals, self.losses(anchors, logits_all, deltas_all, gt_boxes, seeds or [0] * len(gt_boxes))

    def losses(self, anchors: torch.Tensor, logits: torch.Tensor, deltas: torch.Tensor,
               gt_boxes: list[torch.Tensor], seeds: list[int]) -> dict[str, torch.Tensor]:
        cls_losses, box_losses = [], []
        for b, gt in enumerate(gt_boxes):
            with torch.no_grad():
                idx, labels = match(box_iou(gt, anchors), self.cfg.fg_iou_thresh, self.cfg.bg_iou_thresh, True)
                pos, neg = subsample(labels, self.cfg.batch_size_per_image, self.cfg.positive_fraction,
                                     image_generator(seeds[b], 0))
            sel = torch.cat([pos, neg])
            target = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)]).to(logits.dtype)
            norm = max(sel.numel(), 1)
            cls_losses.append(F.binary_cross_entropy_with_logits(logits[b, sel], target, reduction="sum") / norm)
            if pos.numel():
                with torch.no_grad():
                    reg_target = encode_boxes(gt[idx[pos]], anchors[pos])
                box_losses.append(F.l1_loss(deltas[b, pos], reg_target, reduction="sum") / norm)
        n = len(gt_boxes)
        box = torch.stack(box_losses).sum() if box_losses else deltas.sum() * 0
        return {"loss_rpn_cls": torch.stack(cls_losses).sum() / n, "loss_rpn_box": box / n}
