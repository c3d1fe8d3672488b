"""RoI heads: proposals + P2..P5 -> class scores, refined boxes and masks (+ their losses).

Training: GT boxes join the proposals, each is matched to a GT (IoU >= 0.5 foreground), 512 are
sampled per image at 25 % foreground; a two-FC box head (7x7 RoIAlign, sampling ratio 2) gives
softmax cross-entropy + class-specific L1 box loss (per image normalised by its sampled RoIs, then
averaged over images, which keeps DDP and single-process losses equal), and a four-conv + deconv mask head (14x14
RoIAlign) predicts 28x28 masks on the foreground RoIs against targets cut out of the GT masks
(which coco.py rasterised from the polygons/RLE) with RoIAlign.  Inference: per-class decode,
score threshold, per-class NMS, top-k, then masks for the kept boxes.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..config import RoIHeadsConfig
from ..ops import batched_nms, box_iou, decode_boxes, encode_boxes, multiscale_roi_align, roi_align
from .fpn import STRIDES
from .sampling import image_generator, match, subsample

POOL_STRIDES = STRIDES[:4]  # RoIs pool from P2..P5


def _rois(boxes: list[torch.Tensor]) -> torch.Tensor:
    """list of [k_i, 4] -> [sum k_i, 5] with the batch index first (the roi_align layout)."""
    return torch.cat([torch.cat([torch.full_like(b[:, :1], i), b], 1) for i, b in enumerate(boxes)])


class RoIHeads(nn.Module):
    def __init__(self, cfg: RoIHeadsConfig, in_channels: int, num_classes: int):
        super().__init__()
        self.cfg = cfg
        self.num_classes = num_classes
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
    def _pool(self, feats: list[torch.Tensor], rois: torch.Tensor, size: int) -> torch.Tensor:
        # RoIAlign runs in float32 even under AMP (as AMP O1 did): bf16/fp16 RoI coordinates would
        # be off by pixels at 800x1333, and the op wants rois in the features' dtype
        feats = [f.float() for f in feats[:4]]
        return multiscale_roi_align(feats, rois.float(), (size, size), self.cfg.sampling_ratio,
                                    POOL_STRIDES, aligned=True)

    def box_head(self, feats: list[torch.Tensor], rois: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._pool(feats, rois, self.cfg.box_pool_size).flatten(1)
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        return self.cls_score(x).float(), self.bbox_pred(x).float()

    def mask_head(self, feats: list[torch.Tensor], rois: torch.Tensor) -> torch.Tensor:
        x = self._pool(feats, rois, self.cfg.mask_pool_size)
        x = F.relu(self.mask_deconv(self.mask_convs(x)))
        return self.mask_pred(x).float()

    # -------------------------------------------------------------- training
    def forward_train(self, feats, proposals, targets, seeds: list[int] | None = None) -> dict[str, torch.Tensor]:
        sampled_boxes, cls_t, reg_t, mask_boxes, mask_labels, mask_t = [], [], [], [], [], []
        roi_w, mask_w = [], []  # per-RoI loss weights: 1 / (RoIs of its image * images)
        n_img = len(targets)
        seeds = seeds or [0] * n_img
        for i, (props, t) in enumerate(zip(proposals, targets)):
            gt, gl = t["boxes"], t["labels"]
            with torch.no_grad():
                props = torch.cat([props, gt])
                idx, labels = match(box_iou(gt, props), self.cfg.fg_iou_thresh, self.cfg.fg_iou_thresh, False)
                pos, neg = subsample(labels, self.cfg.batch_size_per_image, self.cfg.positive_fraction,
                                     image_generator(seeds[i], 1))
                sel = torch.cat([pos, neg])
                boxes = props[sel]
                cls = torch.cat([gl[idx[pos]], torch.zeros_like(neg)])
                reg = encode_boxes(gt[idx[sel]], boxes, self.cfg.bbox_reg_weights) if gt.numel() else boxes * 0
                sampled_boxes.append(boxes)
                cls_t.append(cls)
                reg_t.append(reg)
                mask_boxes.append(props[pos])
                mask_labels.append(gl[idx[pos]])
                mask_t.append(self._mask_targets(t["masks"], props[pos], idx[pos]))
                roi_w.append(torch.full((sel.numel(),), 1.0 / (max(sel.numel(), 1) * n_img), device=props.device))
                mask_w.append(torch.full((pos.numel(),), 1.0 / (max(pos.numel(), 1) * n_img), device=props.device))
        rois = _rois(sampled_boxes)
        cls_logits, box_deltas = self.box_head(feats, rois)
        cls_t, reg_t, roi_w_t = torch.cat(cls_t), torch.cat(reg_t), torch.cat(roi_w)
        loss_cls = (F.cross_entropy(cls_logits, cls_t, reduction="none") * roi_w_t).sum()
        fg = torch.nonzero(cls_t > 0).flatten()
        if fg.numel():
            k = cls_t[fg] - 1
            pred = box_deltas.view(-1, self.num_classes, 4)[fg, k]
            loss_box = (F.l1_loss(pred, reg_t[fg], reduction="none").sum(1) * roi_w_t[fg]).sum()
        else:
            loss_box = box_deltas.sum() * 0
        mask_rois = _rois(mask_boxes)
        mask_labels_t = torch.cat(mask_labels)
        if mask_rois.shape[0]:
            logits = self.mask_head(feats, mask_rois)
            logits = logits[torch.arange(logits.shape[0], device=logits.device), mask_labels_t - 1]
            per_roi = F.binary_cross_entropy_with_logits(logits, torch.cat(mask_t), reduction="none").mean((1, 2))
            loss_mask = (per_roi * torch.cat(mask_w)).sum()
        else:
            # keep every mask-head parameter in the graph (DDP expects a gradient for each)
            loss_mask = sum(p.sum() for p in [*self.mask_convs.parameters(), *self.mask_deconv.parameters(),
                                              *self.mask_pred.parameters()]) * 0
        return {"loss_cls": loss_cls, "loss_box_reg": loss_box, "loss_mask": loss_mask}

    def _mask_targets(self, gt_masks: torch.Tensor, boxes: torch.Tensor, gt_idx: torch.Tensor) -> torch.Tensor:
        """[P, M, M] binary targets: each box's matched GT mask resampled into the box."""
        m = self.cfg.mask_resolution
        if boxes.shape[0] == 0:
            return boxes.new_zeros((0, m, m))
        rois = torch.cat([gt_idx[:, None].to(boxes.dtype), boxes], 1)
        t = roi_align(gt_masks[:, None].to(boxes.dtype), rois, (m, m), 1.0, 2, True)[:, 0]
        return (t >= 0.5).to(boxes.dtype)

    # ------------------------------------------------------------- inference
    @torch.no_grad()
    def forward_test(self, feats, proposals, image_sizes) -> list[dict[str, torch.Tensor]]:
        cls_logits, box_deltas = self.box_head(feats, _rois(proposals))
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
            keep = batched_nms(boxes, scores, cls, self.cfg.nms_thresh_test)[:self.cfg.detections_per_img]
            out.append({"boxes": boxes[keep], "scores": scores[keep], "labels": cls[keep] + 1})
        if sum(d["boxes"].shape[0] for d in out):
            logits = self.mask_head(feats, _rois([d["boxes"] for d in out]))
            labels = torch.cat([d["labels"] for d in out])
            probs = logits[torch.arange(labels.numel(), device=labels.device), labels - 1].sigmoid()
            for d, p in zip(out, probs.split([d["boxes"].shape[0] for d in out])):
                d["mask_probs"] = p
        else:
            m = self.cfg.mask_resolution
            for d in out:
                d["mask_probs"] = d["boxes"].new_zeros((0, m, m))
        return out
