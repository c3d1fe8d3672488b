"""Box IoU and the box coder (encode/decode) wrappers.

Data flow: anchor/proposal matching and loss targets (modeling/) call
``box_iou`` and ``encode_boxes``; the RPN and the box head call ``decode_boxes``
to turn predicted deltas into boxes.  Conventions: (x1, y1, x2, y2), width =
x2 - x1, deltas (dx, dy, dw, dh) divided by weights (wx, wy, ww, wh).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from . import _autocast, _loader, reference
from ._checks import OpInputError, check_boxes, check_float, check_same_device, check_weights

DEFAULT_CLIP = reference.DEFAULT_CLIP


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU.

    Args:
        a: [N, 4] boxes; b: [M, 4] boxes of the same dtype and device.

    Returns:
        [N, M] IoU (NaN where both boxes have zero area).

    Raises:
        OpInputError: wrong shapes, dtypes or devices.
    """
    check_boxes("a", a)
    check_boxes("b", b)
    if _autocast.op_dtype(a) != _autocast.op_dtype(b):
        raise OpInputError(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    check_same_device(a=a, b=b)
    if _loader.use_compiled("box_iou", a.device) and not _needs_grad(a, b):
        return torch.ops.mpirun_kit.box_iou(a, b)
    return reference.box_iou(*_autocast.cast(a, b))


def _needs_grad(*tensors: torch.Tensor) -> bool:
    # The compiled box ops have no backward; when a caller differentiates through
    # them (e.g. an IoU loss) the reference, which autograd understands, runs instead.
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def encode_boxes(reference_boxes: torch.Tensor, proposals: torch.Tensor, weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0)) -> torch.Tensor:
    """Regression targets that move ``proposals`` onto ``reference_boxes``.

    Args:
        reference_boxes: [N, 4] matched ground-truth boxes.
        proposals: [N, 4] anchors or proposals, same dtype and device.
        weights: (wx, wy, ww, wh), e.g. (1, 1, 1, 1) for the RPN, (10, 10, 5, 5) for the box head.

    Returns:
        [N, 4] targets (dx, dy, dw, dh).

    Raises:
        OpInputError: wrong shapes, dtypes, devices or weights.
    """
    check_boxes("reference_boxes", reference_boxes)
    check_boxes("proposals", proposals)
    if reference_boxes.shape[0] != proposals.shape[0]:
        raise OpInputError(
            f"reference_boxes and proposals must have one row each per pair, got {reference_boxes.shape[0]} and {proposals.shape[0]} rows"
        )
    if _autocast.op_dtype(reference_boxes) != _autocast.op_dtype(proposals):
        raise OpInputError(f"reference_boxes and proposals must have one dtype, got {reference_boxes.dtype} and {proposals.dtype}")
    check_same_device(reference_boxes=reference_boxes, proposals=proposals)
    w = check_weights(weights)
    if _loader.use_compiled("encode_boxes", proposals.device) and not _needs_grad(reference_boxes, proposals):
        return torch.ops.mpirun_kit.encode_boxes(reference_boxes, proposals, list(w))
    return reference.encode_boxes(*_autocast.cast(reference_boxes, proposals), w)


def decode_boxes(
    deltas: torch.Tensor,
    boxes: torch.Tensor,
    weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
    clip_value: float = DEFAULT_CLIP,
) -> torch.Tensor:
    """Apply predicted deltas to boxes.

    Args:
        deltas: [N, 4] or [N, 4*K] (one group of 4 per class).
        boxes: [N, 4] anchors or proposals on the same device (cast to deltas' dtype).
        weights: (wx, wy, ww, wh) the deltas were encoded with.
        clip_value: upper bound of dw/dh before exp(), default log(1000/16).

    Returns:
        Boxes with the shape and dtype of ``deltas``.

    Raises:
        OpInputError: wrong shapes, dtypes, devices or weights.
    """
    if not isinstance(deltas, torch.Tensor) or deltas.dim() != 2 or deltas.shape[1] % 4 != 0 or deltas.shape[1] == 0:
        got = list(deltas.shape) if isinstance(deltas, torch.Tensor) else type(deltas).__name__
        raise OpInputError(f"deltas must be [N, 4*K] (4 values per class), got {got}")
    check_boxes("boxes", boxes)
    if boxes.shape[0] != deltas.shape[0]:
        raise OpInputError(f"boxes must have one row per row of deltas ({deltas.shape[0]}), got {boxes.shape[0]} rows")
    check_float("deltas", deltas)
    check_same_device(deltas=deltas, boxes=boxes)
    w = check_weights(weights)
    clip = float(clip_value)
    # the dtype the op computes deltas in (float32 under autocast): half-precision anchors would
    # move boxes by pixels before the op's float32 rule could help
    boxes = boxes.to(_autocast.op_dtype(deltas))
    if _loader.use_compiled("decode_boxes", deltas.device) and not _needs_grad(deltas, boxes):
        return torch.ops.mpirun_kit.decode_boxes(deltas, boxes, list(w), clip)
    return reference.decode_boxes(*_autocast.cast(deltas, boxes), w, clip)
