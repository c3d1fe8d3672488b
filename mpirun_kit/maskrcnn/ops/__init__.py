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
from .proposals import ProposalParams, generate_proposals, generate_proposals_padded
from .roi_align import (MultiScaleRoIAlign, boxes_to_rois, multiscale_roi_align, multiscale_roi_align_packed, pack_levels,
                        roi_align, roi_align_packed)

__all__ = [
    "DEFAULT_CLIP",
    "MultiScaleRoIAlign",
    "OpInputError",
    "OpsFallbackWarning",
    "OpsUnavailableError",
    "ProposalParams",
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
    "set_flush_denormal",
]


def ops_available() -> bool:
    """True when the compiled extension is loaded (loads it on first call)."""
    return _loader.active().available


def load_error() -> BaseException | None:
    """The exception that stopped the compiled extension from loading, or None."""
    return _loader.active().load()


def set_flush_denormal(on: bool) -> bool:
    """``torch.set_flush_denormal(on)`` in every intra-op thread, not only the calling one.

    torch's setter changes the calling thread's FTZ/DAZ bits; threads of an intra-op pool that
    already exists keep theirs.  The compiled library runs the setter in each of them
    (csrc/ops/flush_denormal.cpp); without it only the caller and threads created later get the
    mode (``train.denormals_flushed()`` tells which).  Returns False when the CPU cannot flush.
    """
    import torch

    ok = torch.set_flush_denormal(on)
    # getattr: a library built before this op existed still runs (the probe then reports)
    every_thread = getattr(torch.ops.mpirun_kit, "set_flush_denormal", None) if _loader.active().available else None
    if every_thread is not None:
        ok = bool(every_thread(on)) and ok
    return ok
