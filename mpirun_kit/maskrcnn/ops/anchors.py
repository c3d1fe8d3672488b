"""FPN anchor generation.

Data flow: the RPN (modeling/) gives the feature sizes of P2..P6 -> here ->
one [H*W*A, 4] anchor tensor per level, locations row-major, the A anchors of a
location innermost (torchvision's AnchorGenerator order, so RPN head outputs
flattened as [N, H, W, A] line up with them).

The [A, 4] cell anchors of each level are cached per device (``_cell_anchors``); the grids are
built on the device from them.  Callers that see the same feature sizes again (the RPN) cache
the grids too (modeling/rpn.py).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from . import _loader, reference
from ._checks import OpInputError


def _per_level(name: str, value: Sequence, n: int) -> list[tuple[float, ...]]:
    # Either one tuple shared by all levels, or one tuple per level.
    if len(value) and all(isinstance(v, (int, float)) for v in value):
        return [tuple(float(v) for v in value)] * n
    if len(value) != n:
        raise OpInputError(f"{name} must give one tuple per level ({n} levels), got {len(value)}: {value!r}")
    out = []
    for i, v in enumerate(value):
        try:
            t = tuple(float(x) for x in v)
        except TypeError:
            t = (float(v),)
        if not t or any(not x > 0 for x in t):
            raise OpInputError(f"{name}[{i}] must be positive numbers, got {v!r}")
        out.append(t)
    return out


def generate_anchors(
    feature_sizes: Sequence[tuple[int, int]],
    strides: Sequence[int],
    sizes: Sequence[Sequence[float]],
    aspect_ratios: Sequence[float] | Sequence[Sequence[float]],
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> list[torch.Tensor]:
    """Anchors for each FPN level.

    Args:
        feature_sizes: (H, W) of each level's feature map.
        strides: image pixels per feature cell, per level (4, 8, 16, 32, 64).
        sizes: anchor sizes per level, e.g. ((32,), (64,), (128,), (256,), (512,)).
        aspect_ratios: height/width ratios, shared (0.5, 1.0, 2.0) or one tuple per level.
        device, dtype: of the result.

    Returns:
        Per level a [H*W*A, 4] tensor, A = len(ratios) * len(sizes[level]).

    Raises:
        OpInputError: mismatched per-level lists or non-positive values.
    """
    n = len(feature_sizes)
    if len(strides) != n or len(sizes) != n:
        raise OpInputError(f"feature_sizes, strides and sizes must have one entry per level, got {n}, {len(strides)} and {len(sizes)}")
    ratios = _per_level("aspect_ratios", aspect_ratios, n)
    level_sizes = _per_level("sizes", sizes, n) if n else []
    device = torch.device(device)
    out = []
    for lvl, ((h, w), stride) in enumerate(zip(feature_sizes, strides)):
        if int(h) < 0 or int(w) < 0 or int(stride) <= 0:
            raise OpInputError(f"level {lvl}: feature size must be >= 0 and stride > 0, got size {(h, w)} stride {stride}")
        cell = _cell_anchors(level_sizes[lvl], ratios[lvl], dtype, device)
        if _loader.use_compiled("grid_anchors", device):
            out.append(torch.ops.mpirun_kit.grid_anchors(cell, int(h), int(w), int(stride)))
        else:
            out.append(reference.grid_anchors(cell, int(h), int(w), int(stride)))
    return out


#: (sizes, ratios, dtype, device) -> [A, 4] cell anchors on that device.  A handful of entries
#: (one per FPN level), so never trimmed.
_cells: dict[tuple, torch.Tensor] = {}


def _cell_anchors(sizes: tuple[float, ...], ratios: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # The cell anchors are computed on the host (a few numbers): one host->device copy per level
    # and device for the life of the process, not one per call (a pageable copy the host waits on).
    key = (sizes, ratios, dtype, device)
    hit = _cells.get(key)
    if hit is None:
        hit = reference.cell_anchors(sizes, ratios, dtype, device)
        if torch.compiler.is_compiling():  # a traced (fake) tensor must not outlive its trace
            return hit
        _cells[key] = hit
    return hit
