"""The fused RPN proposal step.

Data flow: RPN head outputs (objectness [B, A], deltas [B, A, 4]) and the
concatenated anchors of all levels [A, 4] -> per image: pre-NMS top-k, decode,
clip to the image, drop boxes smaller than ``min_size``, NMS, post-NMS top-k ->
proposals for the RoI heads.  One compiled call does the whole batch.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from . import _autocast, _loader, reference
from ._checks import OpInputError, check_boxes, check_float, check_same_device
from .params import ProposalParams


def generate_proposals(
    anchors: torch.Tensor,
    objectness: torch.Tensor,
    deltas: torch.Tensor,
    image_sizes: Sequence[tuple[int, int]],
    params: ProposalParams,
    levels: torch.Tensor | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Proposals for a batch of images.

    Args:
        anchors: [A, 4], all levels concatenated.
        objectness: [B, A] scores (logits or probabilities; only their order matters).
        deltas: [B, A, 4] RPN regression output.
        image_sizes: (h, w) of each image, for clipping.
        params: the counts, thresholds and box-coder settings (``ProposalParams``).
        levels: optional [A] integer FPN level of each anchor.  Given, the pre-NMS
            top-k is taken per level and NMS runs per level (torchvision's RPN);
            omitted, both run over all anchors of the image.

    Returns:
        (boxes, scores): per image [k, 4] boxes and their [k] objectness values
        as passed in, sorted by decreasing objectness, k <= post_nms_top_n.

    Raises:
        OpInputError: mismatched shapes, dtypes or devices, params that are not a ProposalParams.
    """
    sizes, levels = _check_args(anchors, objectness, deltas, image_sizes, params, levels)
    if _loader.use_compiled("generate_proposals", anchors.device):
        boxes, scores, counts = torch.ops.mpirun_kit.generate_proposals(
            anchors, objectness, deltas, _sizes_tensor(sizes, anchors), levels, *params.op_args())
        split = counts.tolist()
        return list(boxes.split(split)), list(scores.split(split))
    anchors, objectness, deltas = _autocast.cast(anchors, objectness, deltas)
    return reference.generate_proposals(anchors, objectness, deltas, sizes, params, levels)


def _check_args(anchors, objectness, deltas, image_sizes, params, levels):
    if not isinstance(params, ProposalParams):
        raise OpInputError(f"params must be a ProposalParams(pre_nms_top_n, post_nms_top_n, nms_thresh, ...), "
                           f"got {type(params).__name__}")
    check_boxes("anchors", anchors)
    a = anchors.shape[0]
    if not isinstance(objectness, torch.Tensor) or objectness.dim() != 2 or objectness.shape[1] != a:
        got = list(objectness.shape) if isinstance(objectness, torch.Tensor) else type(objectness).__name__
        raise OpInputError(f"objectness must be [B, A] with A = {a} (the rows of anchors), got {got}")
    b = objectness.shape[0]
    if not isinstance(deltas, torch.Tensor) or tuple(deltas.shape) != (b, a, 4):
        got = list(deltas.shape) if isinstance(deltas, torch.Tensor) else type(deltas).__name__
        raise OpInputError(f"deltas must be [B, A, 4] = [{b}, {a}, 4], got {got}")
    check_float("objectness", objectness)
    check_float("deltas", deltas)
    if not (_autocast.op_dtype(anchors) == _autocast.op_dtype(objectness) == _autocast.op_dtype(deltas)):
        raise OpInputError(f"anchors, objectness and deltas must have one dtype, got {anchors.dtype}, {objectness.dtype} and {deltas.dtype}")
    check_same_device(anchors=anchors, objectness=objectness, deltas=deltas)
    sizes = [tuple(s) for s in image_sizes]
    if len(sizes) != b or any(len(s) != 2 for s in sizes):
        raise OpInputError(f"image_sizes must hold one (h, w) per image ({b} images), got {list(image_sizes)!r}")
    if levels is not None:
        if not isinstance(levels, torch.Tensor) or levels.dim() != 1 or levels.shape[0] != a or levels.is_floating_point():
            got = f"{levels.dtype} {list(levels.shape)}" if isinstance(levels, torch.Tensor) else type(levels).__name__
            raise OpInputError(f"levels must be an integer [A] tensor with A = {a} (one level per anchor), got {got}")
        check_same_device(anchors=anchors, levels=levels)
        levels = levels.to(torch.int64)
    return sizes, levels


def _sizes_tensor(sizes: list[tuple[int, int]], anchors: torch.Tensor) -> torch.Tensor:
    t = torch.tensor(sizes, dtype=anchors.dtype).reshape(len(sizes), 2)
    if anchors.device.type == "cuda":
        # pinned + non_blocking: the host does not wait for this copy
        t = t.pin_memory().to(anchors.device, non_blocking=True)
    elif anchors.device.type != "cpu":
        # meta and other devices: no pinned memory there (pin_memory needs a CUDA host allocator)
        t = t.to(anchors.device)
    return t


def generate_proposals_padded(
    anchors: torch.Tensor,
    objectness: torch.Tensor,
    deltas: torch.Tensor,
    image_sizes: Sequence[tuple[int, int]],
    params: ProposalParams,
    level_sizes: Sequence[int] = (),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``generate_proposals`` with fixed-size outputs, for the training step.

    Args:
        level_sizes: anchors per FPN level, in the order ``anchors`` concatenates them (host ints:
            the level ranges are slices, never searched on the device); empty = one level.
        others: as ``generate_proposals``.

    Returns:
        (boxes [B, post, 4], scores [B, post], valid [B, post]): image b's proposals in its first
        k_b slots, by decreasing objectness, zeros after.  The compiled kernels read nothing back
        to the host (the CUDA one included); the reference fallback does, per image.

    Raises:
        OpInputError: as ``generate_proposals``, or level_sizes not summing to the anchors.
    """
    a = anchors.shape[0] if isinstance(anchors, torch.Tensor) and anchors.dim() == 2 else -1
    sizes_l = [int(n) for n in level_sizes]
    if sizes_l and (sum(sizes_l) != a or min(sizes_l) < 0):
        raise OpInputError(f"level_sizes must be anchor counts >= 0 summing to the rows of anchors ({a}), got {sizes_l}")
    sizes, _ = _check_args(anchors, objectness, deltas, image_sizes, params, None)
    if _loader.use_compiled("generate_proposals_padded", anchors.device):
        boxes, scores, counts = torch.ops.mpirun_kit.generate_proposals_padded(
            anchors, objectness, deltas, _sizes_tensor(sizes, anchors), sizes_l, *params.op_args())
        valid = torch.arange(params.post_nms_top_n, device=anchors.device)[None, :] < counts[:, None]
        return boxes, scores, valid
    # the compiled kernels take the level sizes as host ints; only the reference needs a level per anchor
    levels = level_ids(sizes_l, anchors.device) if sizes_l else None
    anchors, objectness, deltas = _autocast.cast(anchors, objectness, deltas)
    return reference.generate_proposals_padded(anchors, objectness, deltas, sizes, params, levels)


#: (level sizes, device) -> [A] level id per anchor; a few entries (one per canvas shape in use).
_level_ids: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}
_LEVEL_IDS_CACHED = 8


def level_ids(level_sizes: Sequence[int], device: torch.device) -> torch.Tensor:
    """[sum(level_sizes)] int64 level id of each anchor, built on ``device`` and cached per sizes.

    Built with one fill per level on the device: no host tensor of ~270k ids, no host->device copy.
    """
    key = (tuple(int(n) for n in level_sizes), torch.device(device))
    hit = _level_ids.get(key)
    if hit is not None:
        return hit
    ids = torch.cat([torch.full((n,), i, dtype=torch.int64, device=device) for i, n in enumerate(key[0])])
    if not torch.compiler.is_compiling():  # a traced (fake) tensor must not outlive its trace
        if len(_level_ids) >= _LEVEL_IDS_CACHED:
            _level_ids.pop(next(iter(_level_ids)))  # the oldest shape
        _level_ids[key] = ids
    return ids
