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

from . import _autocast, _loader, reference
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
    if _loader.use_compiled("roi_align", input.device):
        # the CPU kernel checks the batch indices itself (TORCH_CHECK, same wording); checking here
        # too would read rois on the host, a device sync on CUDA
        try:
            return torch.ops.mpirun_kit.roi_align(input, rois, float(spatial_scale), oh, ow, int(sampling_ratio), bool(aligned))
        except RuntimeError as exc:
            if "must be batch indices" in str(exc):
                raise OpInputError(str(exc).splitlines()[0]) from None
            raise
    # the library's ops cast under autocast themselves (_autocast.py); the reference needs it by hand
    input, rois = _autocast.cast(input, rois)
    if rois.device.type == "cpu" and rois.shape[0] > 0 and not torch.compiler.is_compiling():
        # A bad batch index would read out of bounds; on CPU checking costs no sync.
        lo, hi = float(rois[:, 0].min()), float(rois[:, 0].max())
        if lo < 0 or hi >= input.shape[0] or lo != math.floor(lo) or hi != math.floor(hi):
            raise OpInputError(f"rois[:, 0] must be batch indices in [0, {input.shape[0] - 1}], got values in [{lo:g}, {hi:g}]")
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


def _tile_layout(sizes: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """Canvas (H, W) and each level's interior origin (y, x): level 0 on the left, the others
    stacked to its right, each inside a one-pixel border."""
    h0, w0 = sizes[0]
    origins, y = [(1, 1)], 0
    for h, _ in sizes[1:]:
        origins.append((y + 1, w0 + 3))
        y += h + 2
    right_w = max([w + 2 for _, w in sizes[1:]] or [0])  # a list, not a generator: torch.compile traces it
    return (max(h0 + 2, y), w0 + 2 + right_w), origins


class _PackLevels(torch.autograd.Function):
    """Levels -> canvas with edge-replicating borders; backward folds the border gradients back
    onto the edges (cheaper than replicate-pad + cat and their generic backward)."""

    @staticmethod
    def forward(ctx, origins, *features):
        ctx.origins, ctx.sizes = origins, [tuple(f.shape[-2:]) for f in features]
        (hc, wc), _ = _tile_layout(ctx.sizes)
        n, c = features[0].shape[:2]
        fmt = torch.channels_last if features[0].is_contiguous(memory_format=torch.channels_last) and c > 1 else torch.contiguous_format
        # in the dtype RoIAlign computes in (float32 under autocast, _autocast.py), so the canvas is
        # cast once here, not by each roi_align call that reads it (box head, mask head)
        canvas = features[0].new_zeros((n, c, hc, wc), dtype=_autocast.op_dtype(features[0])).contiguous(memory_format=fmt)
        for f, (y, x) in zip(features, origins):
            h, w = f.shape[-2:]
            t = canvas[:, :, y - 1:y + h + 1, x - 1:x + w + 1]
            t[:, :, 1:-1, 1:-1] = f
            t[:, :, 0, 1:-1] = f[:, :, 0]  # borders replicate the edge rows/columns (corners too)
            t[:, :, -1, 1:-1] = f[:, :, -1]
            t[:, :, :, 0] = t[:, :, :, 1]
            t[:, :, :, -1] = t[:, :, :, -2]
        return canvas

    @staticmethod
    def backward(ctx, grad):
        out = []
        for (y, x), (h, w) in zip(ctx.origins, ctx.sizes):
            g = grad[:, :, y - 1:y + h + 1, x - 1:x + w + 1]
            gi = g[:, :, 1:-1, 1:-1].clone()
            gi[:, :, 0] += g[:, :, 0, 1:-1]  # border rows and columns onto the edges they copy
            gi[:, :, -1] += g[:, :, -1, 1:-1]
            gi[:, :, :, 0] += g[:, :, 1:-1, 0]
            gi[:, :, :, -1] += g[:, :, 1:-1, -1]
            for cy, cx in ((0, 0), (0, -1), (-1, 0), (-1, -1)):  # the corners copy the corner pixels
                gi[:, :, cy, cx] += g[:, :, cy, cx]
            out.append(gi)
        return (None, *out)


def pack_levels(features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Tile FPN levels into one [N, C, Hc, Wc] canvas for ``roi_align_packed``.

    Level 0 sits on the left, the coarser levels stacked in a column to its right; each tile has a
    one-pixel border replicating its edge (so bilinear samples at a map's edge read what RoIAlign's
    edge clamp reads) and zeros between tiles.  Returns the canvas and each level's (y, x) origin
    of its interior.  Differentiable: gradients flow back to every level.
    """
    _, origins = _tile_layout([tuple(f.shape[-2:]) for f in features])
    return _PackLevels.apply(origins, *features), origins


def roi_align_packed(
    canvas: torch.Tensor,
    origins: Sequence[tuple[int, int]],
    rois: torch.Tensor,
    output_size: int | tuple[int, int],
    sampling_ratio: int,
    strides: Sequence[int],
    canonical_scale: float = 224.0,
    canonical_level: int = 4,
) -> torch.Tensor:
    """``multiscale_roi_align_packed`` on a canvas from ``pack_levels`` (pack once, pool many)."""
    size = check_output_size(output_size)
    check_boxes("rois", rois, cols=5)
    min_level = int(round(math.log2(strides[0])))
    levels = reference.fpn_levels(rois, len(strides), canonical_scale, canonical_level, min_level)
    scale = torch.tensor([1.0 / s for s in strides], dtype=rois.dtype)
    origin = torch.tensor([[x, y] for y, x in origins], dtype=rois.dtype)
    if rois.device.type == "cuda":
        # two tiny host constants: pinned + non_blocking, so the host does not wait for the copy
        scale = scale.pin_memory().to(rois.device, non_blocking=True)
        origin = origin.pin_memory().to(rois.device, non_blocking=True)
    elif rois.device.type != "cpu":
        # meta and other devices: no pinned memory there (pin_memory needs a CUDA host allocator)
        scale, origin = scale.to(rois.device), origin.to(rois.device)
    moved = torch.cat([rois[:, :1], rois[:, 1:] * scale[levels][:, None] + origin[levels].repeat(1, 2)], dim=1)
    return roi_align(canvas, moved, size, 1.0, sampling_ratio, True)


def multiscale_roi_align_packed(
    features: Sequence[torch.Tensor],
    rois: torch.Tensor,
    output_size: int | tuple[int, int],
    sampling_ratio: int,
    strides: Sequence[int],
    canonical_scale: float = 224.0,
    canonical_level: int = 4,
) -> torch.Tensor:
    """The FPN pooler in one ``roi_align`` call, with a per-RoI level and no host sync (aligned=True).

    ``multiscale_roi_align`` splits the RoIs by level (``nonzero``: the host waits for the device,
    once per level).  Here the levels are tiled into one canvas (``pack_levels``) and each RoI is
    moved into its level's tile: scaled by its level's 1/stride and shifted by the tile origin, so
    one kernel call pools every RoI from its own level.  For RoIs inside the image (the model's:
    proposals and GT boxes are clipped to it) the result equals ``multiscale_roi_align(...,
    aligned=True)`` up to float rounding; a RoI reaching more than a pixel past a level's map would
    read the neighbouring tile's border.  Only the aligned variant: the legacy one stretches tiny
    RoIs to 1x1 feature pixels, which can cross that border.

    Args: as ``multiscale_roi_align`` (rois [K, 5] in image pixels).  Returns [K, C, oh, ow].
    """
    _check_strides(features, strides)
    canvas, origins = pack_levels(list(features))
    return roi_align_packed(canvas, origins, rois, output_size, sampling_ratio, strides, canonical_scale, canonical_level)


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
