"""Detection ops for the Mask R-CNN module: the public API the model imports.

Data flow: modeling/ (RPN, RoI heads) -> these wrappers -> the compiled
extension ``torch.ops.mpirun_kit.*`` (csrc/: CPU kernels everywhere, CUDA kernels
on GPU builds) or, when it cannot be loaded, the pure-PyTorch references
(reference.py) after a one-time ``OpsFallbackWarning`` that quotes the original
load error.  ``ops_available()`` / ``load_error()`` tell which one runs.

Every wrapper checks its inputs first and raises ``OpInputError`` (a SpecError
and a ValueError) with the offending value.  Boxes are (x1, y1, x2, y2).
"""
from __future__ import annotations

from . import _loader
from ._checks import OpInputError
from ._loader import OpsFallbackWarning, OpsUnavailableError
from .anchors import generate_anchors
from .boxes import DEFAULT_CLIP, box_iou, decode_boxes, encode_boxes
from .nms import batched_nms, nms
from .proposals import generate_proposals, generate_proposals_padded
from .roi_align import (MultiScaleRoIAlign, boxes_to_rois, multiscale_roi_align, multiscale_roi_align_packed, pack_levels,
                        roi_align, roi_align_packed)

__all__ = [
    "DEFAULT_CLIP",
    "MultiScaleRoIAlign",
    "OpInputError",
    "OpsFallbackWarning",
    "OpsUnavailableError",
    "batched_nms",
    "box_iou",
    "boxes_to_rois",
    "decode_boxes",
    "encode_boxes",
    "generate_anchors",
    "generate_proposals",
    "generate_proposals_padded",
    "load_error",
    "multiscale_roi_align",
    "multiscale_roi_align_packed",
    "nms",
    "ops_available",
    "pack_levels",
    "roi_align",
    "roi_align_packed",
]


def ops_available() -> bool:
    """True when the compiled extension is loaded (loads it on first call)."""
    return _loader.active().available


def load_error() -> BaseException | None:
    """The exception that stopped the compiled extension from loading, or None."""
    return _loader.active().load()
