"""COCO evaluation: model + val dataset -> bbox and segm mAP on rank 0.

Every rank runs inference on its shard (EvalBatchSampler), converts detections to COCO result
dicts (xywh boxes, RLE masks, original category ids), the lists are gathered to rank 0, and
rank 0 scores them with pycocotools' COCOeval.  ``coco_metrics`` is also usable on its own (the
tests feed ground truth back through it).
"""
from __future__ import annotations

import contextlib
import io
import logging
from typing import Any, Callable

import numpy as np
import torch

log = logging.getLogger(__name__)

#: COCOeval.stats index -> metric suffix
_STATS = {0: "mAP", 1: "AP50", 2: "AP75", 3: "APs", 4: "APm", 5: "APl"}


def to_coco_results(det: dict[str, Any], label_to_cat: dict[int, int]) -> list[dict[str, Any]]:
    from pycocotools import mask as mask_utils

    out = []
    boxes = det["boxes"].cpu().numpy()
    scores = det["scores"].cpu().tolist()
    labels = det["labels"].cpu().tolist()
    masks = det["masks"].cpu().numpy()
    for i in range(len(scores)):
        x0, y0, x1, y1 = boxes[i].tolist()
        rle = mask_utils.encode(np.asfortranarray(masks[i].astype(np.uint8)))
        rle["counts"] = rle["counts"].decode("ascii")
        out.append({"image_id": int(det["image_id"]), "category_id": label_to_cat[labels[i]],
                    "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(scores[i]), "segmentation": rle})
    return out


def coco_metrics(coco_gt, results: list[dict[str, Any]], iou_types=("bbox", "segm"),
                 image_ids: list[int] | None = None) -> dict[str, float]:
    """Score ``results`` against ``coco_gt``; an empty result list scores 0 everywhere."""
    from pycocotools.cocoeval import COCOeval

    metrics: dict[str, float] = {}
    for iou_type in iou_types:
        if not results:
            metrics.update({f"{iou_type}_{v}": 0.0 for v in _STATS.values()})
            continue
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its tables
            dt = coco_gt.loadRes([dict(r) for r in results])
            ev = COCOeval(coco_gt, dt, iou_type)
            if image_ids is not None:
                ev.params.imgIds = image_ids
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        metrics.update({f"{iou_type}_{v}": max(0.0, float(ev.stats[i])) for i, v in _STATS.items()})
    return metrics


@torch.no_grad()
def evaluate(model: torch.nn.Module, dataset, loader, comm,
             progress: Callable[[int, int], None] | None = None) -> dict[str, float] | None:
    """Inference over this rank's shard, gather to rank 0, score there.

    Returns:
        The metrics on rank 0, None on the other ranks.
    """
    was_training = model.training
    model.eval()
    results: list[dict[str, Any]] = []
    n = len(loader)
    for i, batch in enumerate(loader):
        for det in model(batch):
            results.extend(to_coco_results(det, dataset.label_to_cat))
        if progress:
            progress(i + 1, n)
    model.train(was_training)
    gathered = comm.gather_object(results)  # a dist.Comm
    if gathered is None:
        return None
    results = [r for part in gathered for r in part]
    return coco_metrics(dataset.coco, results, image_ids=list(dataset.ids))
