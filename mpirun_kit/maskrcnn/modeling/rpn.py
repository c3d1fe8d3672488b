"""Region Proposal Network: P2..P6 features -> per-image proposals (+ RPN losses in training).

A shared 3x3 conv head predicts, at every location of every level, an objectness logit and 4
box deltas for each of A anchors (one size per level x the aspect ratios).  Proposals come from
the ops package's fused ``generate_proposals`` (per-level pre-NMS top-k, decode, clip, NMS per
level, post-NMS top-k per image).  Training labels anchors by IoU with the GT boxes (>= 0.7 fg,
< 0.3 bg, each GT's best anchors fg), samples 256 per image at half foreground, and applies
binary cross-entropy + L1 box loss, each image's sums normalised by its number of sampled anchors
and averaged over images (so the loss of a batch split across DDP ranks averages to the loss of
the whole batch).  Training works on the whole batch at once with fixed shapes (padded GT, a fixed
number of sampled slots per image, padded proposals with a validity mask), so the step never
reads a device value on the host (sampling.py).
"""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn
from torch.nn import functional as F

from ..config import RPNConfig
from ..ops import ProposalParams, box_iou, encode_boxes, generate_anchors, generate_proposals, generate_proposals_padded
from .fpn import STRIDES
from .sampling import match, subsample

#: feature-shape sets whose anchors the RPN keeps on the device (~6 MB each at 800x1333).
ANCHOR_CACHE_SHAPES = 8


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
        # (feature sizes of every level, device) -> (anchors, level ids), most recently used last
        self._anchor_cache: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()

    def anchors(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """All anchors [A_total, 4] (levels concatenated) and their level ids [A_total].

        Cached on the device per set of feature shapes (the padded canvas shapes in use; a few
        with bucketing), up to ``ANCHOR_CACHE_SHAPES`` of them, least recently used dropped first:
        a step whose canvas was seen before builds nothing and copies nothing to the device.
        """
        sizes = tuple(tuple(int(s) for s in f.shape[-2:]) for f in feats)
        key = (sizes, feats[0].device)
        hit = self._anchor_cache.get(key)
        if hit is not None:
            self._anchor_cache.move_to_end(key)
            return hit
        per_level = generate_anchors(list(sizes), list(STRIDES[:len(feats)]),
                                     [(s,) for s in self.cfg.anchor_sizes], list(self.cfg.aspect_ratios),
                                     feats[0].device)
        levels = torch.cat([torch.full((a.shape[0],), i, dtype=torch.int64, device=a.device)
                            for i, a in enumerate(per_level)])
        hit = (torch.cat(per_level).float(), levels)
        if not torch.compiler.is_compiling():  # a traced (fake) tensor must not outlive its trace
            if len(self._anchor_cache) >= ANCHOR_CACHE_SHAPES:
                self._anchor_cache.popitem(last=False)
            self._anchor_cache[key] = hit
        return hit

    def forward(self, feats: list[torch.Tensor], image_sizes: list[tuple[int, int]],
                targets: dict[str, torch.Tensor] | None = None):
        """Inference: per-image proposal lists.  Training (``targets`` from ``pad_targets``):
        ((boxes [B, post, 4], valid [B, post]), losses)."""
        logits, deltas = [], []
        for f in feats:
            t = F.relu_(self.conv(f))  # in place: the conv's backward needs its input, not its output
            b = f.shape[0]
            # [B, A, H, W] -> [B, H*W*A]: locations row-major, anchors innermost (the anchor order)
            logits.append(self.objectness(t).permute(0, 2, 3, 1).reshape(b, -1))
            deltas.append(self.deltas(t).view(b, self.num_anchors, 4, *t.shape[-2:])
                          .permute(0, 3, 4, 1, 2).reshape(b, -1, 4))
        # in the head's dtype (bf16 under autocast): the proposal op computes in float32 by its own
        # autocast rule (ops/_autocast.py), the losses cast the few sampled values they read
        logits_all = torch.cat(logits, 1)
        deltas_all = torch.cat(deltas, 1)
        anchors, levels = self.anchors(feats)
        c = self.cfg
        with torch.no_grad():
            if targets is None:
                params = ProposalParams(c.pre_nms_topk_test, c.post_nms_topk_test, c.nms_thresh, c.min_size)
                proposals, _ = generate_proposals(anchors, logits_all.detach(), deltas_all.detach(), image_sizes,
                                                  params, levels=levels)
                return proposals, {}
            # the level ranges as host ints (feature sizes x anchors per location): sliced, never searched
            level_sizes = [f.shape[-2] * f.shape[-1] * self.num_anchors for f in feats]
            params = ProposalParams(c.pre_nms_topk_train, c.post_nms_topk_train, c.nms_thresh, c.min_size)
            boxes, _, valid = generate_proposals_padded(anchors, logits_all.detach(), deltas_all.detach(), image_sizes,
                                                        params, level_sizes=level_sizes)
        return (boxes, valid), self.losses(anchors, logits_all, deltas_all, targets)

    def losses(self, anchors: torch.Tensor, logits: torch.Tensor, deltas: torch.Tensor,
               targets: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        gt, gt_valid = targets["boxes"], targets["valid"]
        b, g = gt_valid.shape
        with torch.no_grad():
            # one IoU call for the whole batch: every image's GT against the shared anchors
            iou = box_iou(gt.reshape(-1, 4), anchors).view(b, g, -1)
            idx, labels = match(iou, gt_valid, self.cfg.fg_iou_thresh, self.cfg.bg_iou_thresh, True)
            sel, is_pos, valid = subsample(labels, self.cfg.batch_size_per_image, self.cfg.positive_fraction,
                                           targets["seeds"], 0)
            # each image's sums over its sampled anchors / its count, then the mean over images
            weight = valid / (valid.sum(1, keepdim=True).clamp(min=1) * b)
            matched = gt.gather(1, idx.gather(1, sel)[..., None].expand(-1, -1, 4))
            reg_target = encode_boxes(matched.reshape(-1, 4), anchors[sel].reshape(-1, 4)).view(b, -1, 4)
            reg_target = torch.where(is_pos[..., None], reg_target, torch.zeros_like(reg_target))
        # float32 losses from the sampled slots only (B x 256 values, not the B x A head outputs)
        cls = F.binary_cross_entropy_with_logits(logits.gather(1, sel).float(), is_pos.float(), reduction="none")
        box = F.l1_loss(deltas.gather(1, sel[..., None].expand(-1, -1, 4)).float(), reg_target, reduction="none").sum(2)
        return {"loss_rpn_cls": (cls * weight).sum(),
                "loss_rpn_box": torch.where(is_pos, box * weight, torch.zeros_like(box)).sum()}
