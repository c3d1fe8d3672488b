"""The proposal step's settings and the box coder's clip: plain values every proposal entry point shares.

A leaf of the ops package (it imports only the input checks): ``reference.py`` (the pure-PyTorch
references) and ``proposals.py`` (the wrappers that pick the compiled op or the reference) both take
their ``ProposalParams`` and ``DEFAULT_CLIP`` from here, so neither imports the other's definitions
back (the two used to import each other).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ._checks import OpInputError, check_threshold, check_weights

#: clip for dw/dh before exp() in decode: log(1000 / 16), as in Detectron.
DEFAULT_CLIP = math.log(1000.0 / 16)


def _check_int(name: str, v: object, minimum: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise OpInputError(f"{name} must be an int >= {minimum}, got {v!r}")
    return v


@dataclass(frozen=True)
class ProposalParams:
    """The settings of the proposal step, one value for every entry point (the compiled ops, the
    references, the padded variant).  Checked and normalised on construction.

    Attributes:
        pre_nms_top_n: boxes kept per image before NMS (per level when levels are given).
        post_nms_top_n: boxes kept per image after NMS.
        nms_thresh: NMS IoU threshold.
        min_size: boxes narrower or shorter than this (after clipping) are dropped.
        weights, clip_value: the box coder's, as in ``decode_boxes``.

    Raises:
        OpInputError: a count below 1, a NaN threshold, a negative min_size, bad weights.
    """

    pre_nms_top_n: int
    post_nms_top_n: int
    nms_thresh: float
    min_size: float = 0.0
    weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    clip_value: float = DEFAULT_CLIP

    def __post_init__(self) -> None:
        _check_int("pre_nms_top_n", self.pre_nms_top_n, 1)
        _check_int("post_nms_top_n", self.post_nms_top_n, 1)
        object.__setattr__(self, "nms_thresh", check_threshold("nms_thresh", self.nms_thresh))
        try:
            min_size = float(self.min_size)
        except (TypeError, ValueError):
            raise OpInputError(f"min_size must be a number of pixels, got {self.min_size!r}") from None
        if not min_size >= 0:
            raise OpInputError(f"min_size must be >= 0 pixels, got {self.min_size!r}")
        object.__setattr__(self, "min_size", min_size)
        object.__setattr__(self, "weights", check_weights(self.weights))
        object.__setattr__(self, "clip_value", float(self.clip_value))

    def op_args(self) -> tuple:
        """(pre, post, thresh, min_size, weights, clip_value) in the compiled ops' schema order."""
        return (self.pre_nms_top_n, self.post_nms_top_n, self.nms_thresh, self.min_size, list(self.weights),
                self.clip_value)
