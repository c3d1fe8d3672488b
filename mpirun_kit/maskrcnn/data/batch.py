"""The one batch path: per-image samples (data/coco.py) -> one padded batch -> the model's device.

Where it sits: the DataLoader calls ``Collate`` in its workers, so the padding work (images on one
canvas, boxes/labels/valid, packed masks, seeds) runs off the training process; with
``pin_memory=True`` (the trainer sets it when the device is CUDA) the loader's pin thread moves the
result into page-locked memory; the step then moves it once with ``to_device`` (``non_blocking``:
the host does not wait for the copy) and nothing in the step reads from the device again.  One
process, DDP (which is built with ``device_ids=None``, so it never moves inputs itself) and Horovod
take the same path.  ``MaskRCNN.forward`` also accepts a plain list of samples (tests, evaluation
helpers): it runs the same ``collate`` and ``to_device`` itself.

A batch is a plain dict, so the DataLoader's pinning and ``to_device`` recurse through it:

* ``images`` uint8 [B, 3, H, W], each image as the worker decoded it at the top left of a zero
  canvas (rounded up to ``canvas_multiple``);
* ``image_sizes``: [(h, w)] Python ints, each image's size after its resize (never a device
  tensor: anchors and clipping need them on the host, and reading them from the device would
  sync); ``canvas``: (H, W) the model's input canvas for them, the largest of each side rounded up
  to ``canvas_multiple`` (a few fixed shapes, so ``cudnn.benchmark`` tunes a few times, not every step);
* ``src_sizes`` [(h, w)] and ``flips`` [bool], only when an image still needs its resize or flip:
  the model does both on the device (``MaskRCNN.preprocess``), where they cost a few kernels
  instead of most of a worker's time;
* training only: ``boxes`` [B, G, 4] float32 in the resized (and flipped) frame, ``labels`` [B, G]
  int64, ``valid`` [B, G] bool (G = the most boxes of any image, >= 1), ``masks`` uint8
  [1 + sum G_i, S, S] every GT mask packed as a grid spanning its own box (data/masks.py; row 0
  all zero, the padding row), ``mask_rows`` [B, G] int64 into it, ``seeds`` [B] int64;
* ``meta``: per image ``image_id``, ``orig_size``, ``size``, ``seed``, ``skipped`` (host values).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from .masks import GT_MASK_SIZE, crop_to_boxes

#: batch keys that hold the padded training targets (moved to the device with the images)
TARGET_KEYS = ("boxes", "labels", "valid", "mask_rows", "masks", "seeds")
_META_KEYS = ("image_id", "orig_size", "size", "seed", "skipped")


def canvas_shape(sizes: Sequence[tuple[int, int]], multiple: int) -> tuple[int, int]:
    """The padded (H, W) for images of ``sizes``: the largest of each side rounded up to ``multiple``."""
    return (int(math.ceil(max(h for h, _ in sizes) / multiple) * multiple),
            int(math.ceil(max(w for _, w in sizes) / multiple) * multiple))


@dataclass(frozen=True)
class Collate:
    """``collate_fn`` for the DataLoader (a picklable callable: workers get a copy).

    ``canvas_multiple`` rounds the canvas up (a multiple of the model's size divisibility); bigger
    multiples give fewer distinct shapes at the price of more padding.
    """

    canvas_multiple: int = 32

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return collate(samples, self.canvas_multiple)


def collate(samples: Sequence[Mapping[str, Any]], canvas_multiple: int = 32) -> dict[str, Any]:
    """Samples -> one padded batch of host tensors (see the module docstring for the layout)."""
    src = [(int(s["image"].shape[-2]), int(s["image"].shape[-1])) for s in samples]
    sizes = [tuple(int(v) for v in s["size"]) if "size" in s else hw for s, hw in zip(samples, src)]
    flips = [bool(s.get("flip", False)) for s in samples]
    sh, sw = canvas_shape(src, canvas_multiple)
    images = torch.zeros((len(samples), 3, sh, sw), dtype=torch.uint8)
    for i, (s, (h, w)) in enumerate(zip(samples, src)):
        images[i, :, :h, :w] = s["image"]  # one strided copy (a worker's sample is an HWC view)
    out: dict[str, Any] = {"images": images, "image_sizes": sizes, "canvas": canvas_shape(sizes, canvas_multiple),
                           "meta": [{k: s[k] for k in _META_KEYS if k in s} for s in samples]}
    if src != sizes or any(flips):  # the device resizes/flips (MaskRCNN.preprocess)
        out["src_sizes"], out["flips"] = src, flips
    if all("boxes" in s for s in samples):
        out.update(_pad_targets(samples))
    return out


def _box_masks(s: Mapping[str, Any]) -> torch.Tensor:
    """A sample's masks as box-local grids (data/masks.py); full-frame ones are cut out here."""
    m = s["masks"]
    if s.get("mask_frame") == "box" or m.shape[0] == 0:
        return m if m.shape[0] else torch.zeros((0, GT_MASK_SIZE, GT_MASK_SIZE), dtype=torch.uint8)
    return crop_to_boxes(m, s["boxes"].float())


def _pad_targets(samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    b = len(samples)
    counts = [int(s["boxes"].shape[0]) for s in samples]
    g = max(1, *counts)
    boxes = torch.zeros((b, g, 4))
    labels = torch.zeros((b, g), dtype=torch.int64)
    valid = torch.zeros((b, g), dtype=torch.bool)
    rows = torch.zeros((b, g), dtype=torch.int64)
    box_masks = [_box_masks(s) for s in samples]
    mh = max(int(m.shape[-2]) for m in box_masks)
    mw = max(int(m.shape[-1]) for m in box_masks)
    masks = torch.zeros((1 + sum(counts), mh, mw), dtype=torch.uint8)
    row = 1
    for i, (s, m, n) in enumerate(zip(samples, box_masks, counts)):
        boxes[i, :n] = s["boxes"].float()
        labels[i, :n] = s["labels"]
        valid[i, :n] = True
        rows[i, :n] = torch.arange(row, row + n)
        masks[row:row + n, :m.shape[-2], :m.shape[-1]] = m
        row += n
    seeds = torch.tensor([int(s.get("seed", 0)) for s in samples], dtype=torch.int64)
    return {"boxes": boxes, "labels": labels, "valid": valid, "mask_rows": rows, "masks": masks, "seeds": seeds}


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """Every tensor of ``batch`` onto ``device``, without making the host wait (``non_blocking``).

    From pinned memory a CUDA copy is asynchronous; from pageable memory CUDA stages it and the
    call returns once the source was read, still without waiting for the GPU's queue.  Tensors
    already on ``device`` are returned as they are.
    """
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def is_batch(x: Any) -> bool:
    """True for a collated batch (a dict with ``images``), False for a list of samples."""
    return isinstance(x, Mapping) and "images" in x
