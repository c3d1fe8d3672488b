"""RoIAlign and the multi-level (FPN) pooler.

Data flow: the box and mask heads (modeling/) give FPN features P2..P5 and
proposals as [K, 5] rois (batch index, x1, y1, x2, y2 in image pixels) ->
``multiscale_roi_align`` assigns each RoI a level (FPN eq. 1), pools it there
with ``roi_align`` and returns [K, C, oh, ow] in the input order.

The compiled op is differentiable with respect to ``input`` (its Autograd kernel
calls the ``_roi_align_backward`` op); so is the reference fallback.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import _loader, reference
from ._checks import OpInputError, check_boxes, check_output_size, check_roi_align_inputs


def boxes_to_rois(boxes: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-image [L_i, 4] boxes -> one [sum L_i, 5] rois tensor with the image index in column 0."""
    for i, b in enumerate(boxes):
        check_boxes(f"boxes[{i}]", b)
    if not boxes:
        raise OpInputError("boxes must hold one [L, 4] tensor per image, got an empty list")
    idx = torch.cat([torch.full((b.shape[0], 1), i, dtype=b.dtype, device=b.device) for i, b in enumerate(boxes)])
    return torch.cat([idx, torch.cat(list(boxes))], dim=1)


def roi_align(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size: int | tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    aligned: bool = False,
) -> torch.Tensor:
    """Bilinear RoI pooling (Mask R-CNN's RoIAlign).

    Args:
        input: [N, C, H, W], NCHW or channels-last (the output follows: a
            channels-last input gives a channels-last output).
        rois: [K, 5] (batch index, x1, y1, x2, y2) in image coordinates, same dtype and device.
        output_size: int or (oh, ow).
        spatial_scale: feature-map size / image size (1 / stride).
        sampling_ratio: samples per bin along each axis; <= 0 means adaptive,
            ``ceil(roi_size / output_size)``.
        aligned: True shifts the box by -0.5 pixel so that samples line up with
            pixel centres (Detectron2's fix); False keeps the original Mask R-CNN
            behaviour, which also forces RoIs to be at least 1x1.

    Returns:
        [K, C, oh, ow].

    Raises:
        OpInputError: wrong shapes, dtypes, devices, output size or batch indices.
    """
    oh, ow = check_output_size(output_size)
    check_roi_align_inputs(input, rois, sampling_ratio)
    if rois.device.type == "cpu" and rois.shape[0] > 0 and not torch.compiler.is_compiling():
        # A bad batch index would read out of bounds; on CPU checking costs no sync.
        lo, hi = float(rois[:, 0].min()), float(rois[:, 0].max())
        if lo < 0 or hi >= input.shape[0] or lo != math.floor(lo) or hi != math.floor(hi):
            raise OpInputError(f"rois[:, 0] must be batch indices in [0, {input.shape[0] - 1}], got values in [{lo:g}, {hi:g}]")
    if _loader.use_compiled("roi_align", input.device):
        return torch.ops.mpirun_kit.roi_align(input, rois, float(spatial_scale), oh, ow, int(sampling_ratio), bool(aligned))
    return reference.roi_align(input, rois, (oh, ow), float(spatial_scale), int(sampling_ratio), bool(aligned))


def _check_strides(features: Sequence[torch.Tensor], strides: Sequence[int]) -> None:
    if len(features) != len(strides) or not features:
        raise OpInputError(f"features and strides must pair up one per FPN level, got {len(features)} features and {len(strides)} strides")
    for i, s in enumerate(strides):
        if not isinstance(s, int) or s <= 0 or s & (s - 1):
            raise OpInputError(f"strides[{i}] must be a power of two (4, 8, 16, 32 for P2..P5), got {s!r}")
        if i and s != 2 * strides[i - 1]:
            raise OpInputError(f"strides must double from level to level, got {list(strides)}")


def multiscale_roi_align(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    output_size: int | tuple[int, int],
    sampling_ratio: int,
    strides: Sequence[int],
    canonical_scale: float = 224.0,
    canonical_level: int = 4,
    aligned: bool = False,
) -> torch.Tensor:
    """FPN pooler: each RoI is pooled from one level, chosen by its size.

    Level k = floor(canonical_level + log2(sqrt(area) / canonical_scale) + 1e-6),
    clamped to the levels given (FPN paper eq. 1, as torchvision's LevelMapper).

    Args:
        features: per level [N, C, H_l, W_l], finest first (P2..P5).
        rois: [K, 5] (batch index, x1, y1, x2, y2) in image coordinates.
        output_size, sampling_ratio, aligned: as in ``roi_align``.
        strides: stride of each level, doubling (4, 8, 16, 32).

    Returns:
        [K, C, oh, ow], row i pooled for rois[i].

    Raises:
        OpInputError: mismatched features/strides or bad rois.
    """
    size = check_output_size(output_size)
    _check_strides(features, strides)
    check_boxes("rois", rois, cols=5)
    return reference.multiscale_roi_align(
        features, rois, size, sampling_ratio, list(strides), canonical_scale, canonical_level, aligned, roi_align_fn=roi_align
    )


@dataclass(frozen=True)
class MultiScaleRoIAlign:
    """The FPN pooler as a value: its settings, and ``__call__(features, rois)``.

    ``levels=(2, 5)`` means features P2..P5 with strides 4..32.
    """

    output_size: int | tuple[int, int]
    sampling_ratio: int
    canonical_scale: float = 224.0
    canonical_level: int = 4
    levels: tuple[int, int] = (2, 5)
    aligned: bool = False

    @property
    def strides(self) -> tuple[int, ...]:
        """Stride of each level, finest first."""
        return tuple(2**lvl for lvl in range(self.levels[0], self.levels[1] + 1))

    def __call__(self, features: Sequence[torch.Tensor], rois: torch.Tensor) -> torch.Tensor:
        if len(features) != len(self.strides):
            raise OpInputError(
                f"MultiScaleRoIAlign(levels={self.levels}) expects {len(self.strides)} feature maps (P{self.levels[0]}..P{self.levels[1]}), got {len(features)}"
            )
        return multiscale_roi_align(
            features, rois, self.output_size, self.sampling_ratio, list(self.strides), self.canonical_scale, self.canonical_level, self.aligned
        )
