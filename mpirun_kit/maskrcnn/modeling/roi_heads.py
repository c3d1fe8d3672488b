"""RoI heads: proposals + P2..P5 -> class scores, refined boxes and masks (+ their losses).

Training: GT boxes join the proposals, each is matched to a GT (IoU >= 0.5 foreground), 512 are
sampled per image at 25 % foreground; a two-FC box head (7x7 RoIAlign, sampling ratio 2) gives
softmax cross-entropy + class-specific L1 box loss (per image normalised by its sampled RoIs, then
averaged over images, which keeps DDP and single-process losses equal), and a four-conv + deconv mask head (14x14
RoIAlign) predicts 28x28 masks on the foreground RoIs against targets cut out of the GT masks
(which coco.py rasterised from the polygons/RLE on small grids spanning each GT box; data/masks.py)
with one ``grid_sample`` over the mask slots.  Inference: per-class decode,
score threshold, per-class NMS, top-k, then masks for the kept boxes (pooled from the packed
levels as in training; the mask predictor on each detection's own class only).

Training runs on the whole batch with fixed shapes: padded proposals + padded GT, a fixed number of
sampled slots per image (invalid ones weighted 0), and a mask head on the foreground only: a
fixed-size mask batch of ``mask_rois_per_image`` x images slots (``mask_slots``), filled on the
device with the foreground slots of any image of the batch (``sampling.gather_foreground``: a
random subset when there are more, invalid padding slots with no loss when there are fewer), and RoIAlign over all FPN levels in one call per head on the levels tiled once per step
(``pack_levels`` + ``roi_align_packed``).  Nothing in it reads a device value on the host, except
where the trainer asks for ``compact_mask_slots`` (on the CPU, where the tensors live in host memory
and reading one waits for nothing): there the padding slots are dropped before the mask head, which
otherwise spends most of its convolutions on slots whose loss weight is 0 (issue #32).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..config import RoIHeadsConfig
from ..data.masks import resample_masks
from ..ops import (batched_nms, decode_boxes, encode_boxes, pack_levels,
                   roi_align_packed)
from .fpn import STRIDES
from .sampling import batched_iou, gather_foreground, match, subsample

POOL_STRIDES = STRIDES[:4]  # RoIs pool from P2..P5
_MASK_SALT = 2  # the mask head's draw (0 = RPN sampling, 1 = RoI sampling)


def mask_slots(cfg: RoIHeadsConfig, images: int) -> int:
    """Slots the mask head runs on for a batch of ``images``: ``mask_rois_per_image`` per image on
    average (0: every foreground slot the sampler can give, ``batch_size_per_image *
    positive_fraction`` per image), shared by the whole batch."""
    max_pos = int(cfg.batch_size_per_image * cfg.positive_fraction)
    per_image = min(cfg.mask_rois_per_image, max_pos) if cfg.mask_rois_per_image > 0 else max_pos
    return per_image * images


def _rois(boxes: list[torch.Tensor]) -> torch.Tensor:
    """list of [k_i, 4] -> [sum k_i, 5] with the batch index first (the roi_align layout)."""
    return torch.cat([torch.cat([torch.full_like(b[:, :1], i), b], 1) for i, b in enumerate(boxes)])


class RoIHeads(nn.Module):
    def __init__(self, cfg: RoIHeadsConfig, in_channels: int, num_classes: int):
        super().__init__()
        self.cfg = cfg
        self.num_classes = num_classes
        #: forward_train adds ``fg_rois_per_image`` (foreground RoIs sampled per image: what an
        #: uncapped mask head would train on) and ``mask_rois_per_image`` (what it trained on) to
        #: its loss dict, detached, for the trainer's log; off, the dict holds losses only
        self.report_stats = False
        #: run the mask head on the valid slots only (the trainer sets it on the CPU): same loss and
        #: gradients, since every padding slot has loss weight 0, but shapes that follow the data
        #: and one read of the slot count, a device sync on a GPU; off, the shapes are fixed
        self.compact_mask_slots = False
        p = cfg.box_pool_size
        self.fc1 = nn.Linear(in_channels * p * p, cfg.fc_dim)
        self.fc2 = nn.Linear(cfg.fc_dim, cfg.fc_dim)
        self.cls_score = nn.Linear(cfg.fc_dim, num_classes + 1)  # index 0 = background
        self.bbox_pred = nn.Linear(cfg.fc_dim, 4 * num_classes)
        convs, ch = [], in_channels
        for _ in range(cfg.mask_num_convs):
            convs += [nn.Conv2d(ch, cfg.mask_conv_dim, 3, padding=1), nn.ReLU(inplace=True)]
            ch = cfg.mask_conv_dim
        self.mask_convs = nn.Sequential(*convs)
        self.mask_deconv = nn.ConvTranspose2d(ch, cfg.mask_conv_dim, 2, stride=2)
        self.mask_pred = nn.Conv2d(cfg.mask_conv_dim, num_classes, 1)
        for m in [*self.mask_convs, self.mask_deconv]:
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
        for m in (self.fc1, self.fc2):
            nn.init.kaiming_uniform_(m.weight, a=1)
            nn.init.zeros_(m.bias)
        nn.init.normal_(self.cls_score.weight, std=0.01)
        nn.init.normal_(self.bbox_pred.weight, std=0.001)
        nn.init.normal_(self.mask_pred.weight, std=0.001)
        for m in (self.cls_score, self.bbox_pred, self.mask_pred):
            nn.init.zeros_(m.bias)

    # ----------------------------------------------------------------- heads
    def _pool(self, packed: tuple[torch.Tensor, list], rois: torch.Tensor, size: int) -> torch.Tensor:
        """RoIAlign of [K, 5] RoIs over P2..P5 tiled by ``pack_levels`` (canvas, origins): one kernel
        call, each RoI from its own level, no host sync (the RoIs are clipped to the image)."""
        canvas, origins = packed
        # RoIAlign runs in float32 even under AMP by the op's own autocast rule (ops/_autocast.py)
        return roi_align_packed(canvas, origins, rois.float(), (size, size), self.cfg.sampling_ratio, POOL_STRIDES)

    def box_head(self, packed, rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._pool(packed, rois, self.cfg.box_pool_size).flatten(1)
        # ReLUs in place (the linears' and the deconv's backward need their inputs, not their outputs)
        x = F.relu_(self.fc2(F.relu_(self.fc1(x))))
        return self.cls_score(x).float(), self.bbox_pred(x).float()

    def mask_head(self, packed, rois: torch.Tensor, classes: torch.Tensor | None = None) -> torch.Tensor:
        """Mask logits [K, num_classes, M, M]; with ``classes`` ([K], 0-based), only each RoI's own
        class: [K, M, M] (inference, which reads one class per detection: the 1x1 predictor on
        one channel instead of all, 80x fewer of its FLOPs; issue #32)."""
        x = self._pool(packed, rois, self.cfg.mask_pool_size)
        x = F.relu_(self.mask_deconv(self.mask_convs(x)))
        if classes is None:
            return self.mask_pred(x).float()
        w = self.mask_pred.weight.flatten(1).index_select(0, classes)  # [K, C]
        b = self.mask_pred.bias.index_select(0, classes)
        out = torch.baddbmm(b[:, None, None].to(x.dtype), w[:, None, :].to(x.dtype), x.flatten(2))  # [K, 1, M*M]
        return out.view(x.shape[0], *x.shape[2:]).float()

    # -------------------------------------------------------------- training
    def forward_train(self, feats, proposals: tuple[torch.Tensor, torch.Tensor],
                      targets: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Losses for padded proposals ([B, P, 4], valid [B, P]) and padded targets (meta_arch.pad_targets)."""
        gt, gt_valid, gt_labels = targets["boxes"], targets["valid"], targets["labels"]
        b = gt.shape[0]
        with torch.no_grad():
            props = torch.cat([proposals[0].to(gt.dtype), gt], 1)  # GT boxes join the proposals
            props_valid = torch.cat([proposals[1], gt_valid], 1)
            idx, labels = match(batched_iou(gt, props), gt_valid, self.cfg.fg_iou_thresh, self.cfg.fg_iou_thresh, False)
            labels = torch.where(props_valid, labels, torch.full_like(labels, -1))  # padding is never sampled
            sel, is_pos, valid = subsample(labels, self.cfg.batch_size_per_image, self.cfg.positive_fraction,
                                           targets["seeds"], 1)
            boxes = props.gather(1, sel[..., None].expand(-1, -1, 4))
            gt_sel = idx.gather(1, sel)
            cls_t = torch.where(is_pos, gt_labels.gather(1, gt_sel), torch.zeros_like(gt_sel))
            reg_t = encode_boxes(gt.gather(1, gt_sel[..., None].expand(-1, -1, 4)).reshape(-1, 4),
                                 boxes.reshape(-1, 4), self.cfg.bbox_reg_weights).view(b, -1, 4)
            reg_t = torch.where(is_pos[..., None], reg_t, torch.zeros_like(reg_t))
            # per-RoI weight 1 / (sampled RoIs of its image * images): the old per-image mean
            roi_w = valid / (valid.sum(1, keepdim=True).clamp(min=1) * b)
            batch_idx = torch.arange(b, device=gt.device, dtype=boxes.dtype)[:, None, None].expand(-1, boxes.shape[1], 1)
            rois = torch.cat([batch_idx, boxes], 2)  # [B, S, 5]
        # P2..P5 tiled once for both heads' RoIAlign (in float32 under autocast: ops/_autocast.py)
        packed = pack_levels(feats[:4])
        cls_logits, box_deltas = self.box_head(packed, rois.reshape(-1, 5))
        loss_cls = (F.cross_entropy(cls_logits, cls_t.reshape(-1), reduction="none") * roi_w.reshape(-1)).sum()
        k = (cls_t.reshape(-1) - 1).clamp(min=0)
        pred = box_deltas.view(-1, self.num_classes, 4).gather(1, k[:, None, None].expand(-1, 1, 4))[:, 0]
        box_l1 = F.l1_loss(pred, reg_t.reshape(-1, 4), reduction="none").sum(1)
        loss_box = torch.where(is_pos.reshape(-1), box_l1 * roi_w.reshape(-1), torch.zeros_like(box_l1)).sum()
        # the mask head runs on the foreground only: a fixed number of slots for the whole batch
        # (mask_slots), filled with the foreground of any of its images (foreground comes first
        # in each image's sample, so only the first ``max_pos`` slots can hold any)
        max_pos = min(int(self.cfg.batch_size_per_image * self.cfg.positive_fraction), sel.shape[1])
        cap = mask_slots(self.cfg, b)
        if max_pos == 0 or cap == 0:
            # keep every mask-head parameter in the graph (DDP expects a gradient for each)
            loss_mask = sum(p.sum() for p in [*self.mask_convs.parameters(), *self.mask_deconv.parameters(),
                                              *self.mask_pred.parameters()]) * 0
            return self._with_stats({"loss_cls": loss_cls, "loss_box_reg": loss_box, "loss_mask": loss_mask},
                                    is_pos, is_pos.new_zeros(1), b)
        with torch.no_grad():
            pick, img, m_valid = gather_foreground(is_pos[:, :max_pos], targets["seeds"], cap, _MASK_SALT)
            if self.compact_mask_slots and not torch.compiler.is_compiling():
                # the valid slots come first (gather_foreground ranks every foreground slot above the
                # padding); at least one slot, so the head's parameters keep their (zero) gradients
                n = max(int(m_valid.sum()), 1)
                pick, img, m_valid = pick[:n], img[:n], m_valid[:n]
            # flat index into [B * S] (the gather above saw [B, max_pos])
            flat = img * sel.shape[1] + (pick - img * max_pos)
            m_rois = rois.reshape(-1, 5).index_select(0, flat)
            m_labels = (cls_t.reshape(-1).index_select(0, flat) - 1).clamp(min=0)
            m_gt = gt_sel.reshape(-1).index_select(0, flat)
            m_rows = targets["mask_rows"].reshape(-1).index_select(0, img * gt.shape[1] + m_gt)
            m_gt_boxes = gt.reshape(-1, 4).index_select(0, img * gt.shape[1] + m_gt)
            mask_t = self._mask_targets(targets["masks"], m_gt_boxes, m_rois[:, 1:], m_rows)
            # per-slot weight 1 / (its image's valid slots * images): a per-image mean averaged over
            # the images, as the box losses (and as before, when the head ran per image)
            per_img = ((img[None, :] == torch.arange(b, device=img.device)[:, None]) & m_valid[None, :]).sum(1)
            mask_w = m_valid / (per_img.index_select(0, img).clamp(min=1) * b)
        logits = self.mask_head(packed, m_rois)
        logits = logits.gather(1, m_labels[:, None, None, None].expand(-1, 1, *logits.shape[2:]))[:, 0]
        per_roi = F.binary_cross_entropy_with_logits(logits, mask_t, reduction="none").mean((1, 2))
        loss_mask = torch.where(m_valid, per_roi * mask_w, torch.zeros_like(per_roi)).sum()
        return self._with_stats({"loss_cls": loss_cls, "loss_box_reg": loss_box, "loss_mask": loss_mask},
                                is_pos, m_valid, b)

    def _with_stats(self, losses: dict[str, torch.Tensor], is_pos: torch.Tensor, m_valid: torch.Tensor,
                    images: int) -> dict[str, torch.Tensor]:
        if self.report_stats:
            losses["fg_rois_per_image"] = is_pos.sum().float().detach() / images
            losses["mask_rois_per_image"] = m_valid.sum().float().detach() / images
        return losses

    def _mask_targets(self, gt_masks: torch.Tensor, gt_boxes: torch.Tensor, boxes: torch.Tensor,
                      rows: torch.Tensor) -> torch.Tensor:
        """[P, M, M] binary targets: GT mask ``rows[i]`` of ``gt_masks`` [R, S, S] (a grid spanning
        ``gt_boxes[i]``, data/masks.py) resampled into box i; one ``grid_sample``, no host sync."""
        return resample_masks(gt_masks.index_select(0, rows), gt_boxes, boxes,
                              self.cfg.mask_resolution, self.cfg.sampling_ratio).to(boxes.dtype)

    # ------------------------------------------------------------- inference
    @torch.no_grad()
    def forward_test(self, feats, proposals, image_sizes) -> list[dict[str, torch.Tensor]]:
        # P2..P5 tiled once for both heads, as in training: one RoIAlign call per head, in the
        # RoIs' order (the per-level split costs a cat and a gather of the pooled features; issue #32)
        packed = pack_levels(feats[:4])
        cls_logits, box_deltas = self.box_head(packed, _rois(proposals))
        scores_all = F.softmax(cls_logits, -1)
        k = self.num_classes
        out, start = [], 0
        for props, (h, w) in zip(proposals, image_sizes):
            n = props.shape[0]
            scores = scores_all[start:start + n, 1:]
            boxes = decode_boxes(box_deltas[start:start + n], props.float(), self.cfg.bbox_reg_weights).view(n, k, 4)
            start += n
            boxes = torch.stack([boxes[..., 0].clamp(0, w), boxes[..., 1].clamp(0, h),
                                 boxes[..., 2].clamp(0, w), boxes[..., 3].clamp(0, h)], -1)
            keep = scores > self.cfg.score_thresh_test
            rows, cls = torch.nonzero(keep, as_tuple=True)
            boxes, scores = boxes[rows, cls], scores[rows, cls]
            nonempty = ((boxes[:, 2] - boxes[:, 0]) > 0) & ((boxes[:, 3] - boxes[:, 1]) > 0)
            boxes, scores, cls = boxes[nonempty], scores[nonempty], cls[nonempty]
            keep = batched_nms(boxes, scores, cls, self.cfg.nms_thresh_test, max_keep=self.cfg.detections_per_img)
            out.append({"boxes": boxes[keep], "scores": scores[keep], "labels": cls[keep] + 1})
        if sum(d["boxes"].shape[0] for d in out):
            labels = torch.cat([d["labels"] for d in out])
            probs = self.mask_head(packed, _rois([d["boxes"] for d in out]), labels - 1).sigmoid()
            for d, p in zip(out, probs.split([d["boxes"].shape[0] for d in out])):
                d["mask_probs"] = p
        else:
            m = self.cfg.mask_resolution
            for d in out:
                d["mask_probs"] = d["boxes"].new_zeros((0, m, m))
        return out
