"""NMS wrappers: check inputs, then the compiled kernel or the reference.

Data flow: RPN proposals and box-head detections (modeling/) -> here -> kept
indices.  Both backends keep the boxes greedy NMS keeps and return their indices
sorted by decreasing score (ties: lower index first).
"""
from __future__ import annotations

import torch

from . import _autocast, _loader, reference
from ._checks import OpInputError, check_boxes, check_same_device, check_threshold, check_vector


def _check(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> float:
    check_boxes("boxes", boxes)
    check_vector("scores", scores, boxes.shape[0], "boxes")
    if _autocast.op_dtype(scores) != _autocast.op_dtype(boxes):
        raise OpInputError(f"scores must have the dtype of boxes ({boxes.dtype}), got {scores.dtype}; convert with scores.to(boxes.dtype)")
    check_same_device(boxes=boxes, scores=scores)
    return check_threshold("iou_threshold", iou_threshold)


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression.

    Args:
        boxes: [N, 4] (x1, y1, x2, y2).
        scores: [N], same dtype and device as boxes.
        iou_threshold: a box is dropped when its IoU with a kept, higher-scoring
            box is strictly greater than this.

    Returns:
        int64 [K] indices of the kept boxes, sorted by decreasing score.

    Raises:
        OpInputError: wrong shapes, dtypes or devices (the message names the value).
    """
    thr = _check(boxes, scores, iou_threshold)
    if _loader.use_compiled("nms", boxes.device):
        return torch.ops.mpirun_kit.nms(boxes, scores, thr)
    return reference.nms(*_autocast.cast(boxes, scores), thr)


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float,
                max_keep: int | None = None) -> torch.Tensor:
    """NMS run independently per group (class or image) in one call.

    Args:
        boxes: [N, 4]; scores: [N]; idxs: [N] integer group of each box.
        iou_threshold: as in ``nms``, applied only between boxes of one group.
        max_keep: return only the first ``max_keep`` kept boxes (a detector's top-k after NMS):
            the same indices as ``batched_nms(...)[:max_keep]``, which the CPU kernel finds
            without running NMS over every box.  None: all of them.

    Returns:
        int64 [K] indices of the kept boxes over all groups, sorted by decreasing score.

    Raises:
        OpInputError: wrong shapes, dtypes or devices, or a max_keep that is not a count.
    """
    thr = _check(boxes, scores, iou_threshold)
    check_vector("idxs", idxs, boxes.shape[0], "boxes")
    if idxs.is_floating_point() or idxs.is_complex():
        raise OpInputError(f"idxs must be an integer tensor (a group id per box), got dtype {idxs.dtype}")
    check_same_device(boxes=boxes, idxs=idxs)
    if max_keep is None:
        limit = -1
    elif isinstance(max_keep, bool) or not isinstance(max_keep, int) or max_keep < 0:
        raise OpInputError(f"max_keep must be a count >= 0 of kept boxes to return (or None for all), got {max_keep!r}")
    else:
        limit = max_keep
    idxs = idxs.to(torch.int64)
    if _loader.use_compiled("batched_nms", boxes.device):
        return torch.ops.mpirun_kit.batched_nms(boxes, scores, idxs, thr, limit)
    return reference.batched_nms(*_autocast.cast(boxes, scores), idxs, thr, limit)
