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

* ``images`` uint8 [B, 3, H, W], each image at the top left of a zero canvas; the canvas shape is
  the largest image rounded up to ``canvas_multiple`` (a few fixed shapes, so ``cudnn.benchmark``
  tunes a few times, not every step); the model normalises it and zeroes the padding again;
* ``image_sizes``: [(h, w)] Python ints (never a device tensor: anchors and clipping need them on
  the host, and reading them from the device would sync);
* training only: ``boxes`` [B, G, 4] float32, ``labels`` [B, G] int64, ``valid`` [B, G] bool
  (G = the most boxes of any image, >= 1), ``masks`` uint8 [1 + sum G_i, Hm, Wm] every GT mask
  packed (row 0 all zero, the padding row), ``mask_rows`` [B, G] int64 into it, ``seeds`` [B] int64;
* ``meta``: per image ``image_id``, ``orig_size``, ``size``, ``seed``, ``skipped`` (host values).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

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
    sizes = [(int(s["image"].shape[-2]), int(s["image"].shape[-1])) for s in samples]
    ph, pw = canvas_shape(sizes, canvas_multiple)
    images = torch.zeros((len(samples), 3, ph, pw), dtype=torch.uint8)
    for i, (s, (h, w)) in enumerate(zip(samples, sizes)):
        images[i, :, :h, :w] = s["image"]
    out: dict[str, Any] = {"images": images, "image_sizes": sizes,
                           "meta": [{k: s[k] for k in _META_KEYS if k in s} for s in samples]}
    if all("boxes" in s for s in samples):
        out.update(_pad_targets(samples))
    return out


def _pad_targets(samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    b = len(samples)
    counts = [int(s["boxes"].shape[0]) for s in samples]
    g = max(1, *counts)
    boxes = torch.zeros((b, g, 4))
    labels = torch.zeros((b, g), dtype=torch.int64)
    valid = torch.zeros((b, g), dtype=torch.bool)
    rows = torch.zeros((b, g), dtype=torch.int64)
    mh = max(int(s["masks"].shape[-2]) for s in samples)
    mw = max(int(s["masks"].shape[-1]) for s in samples)
    masks = torch.zeros((1 + sum(counts), mh, mw), dtype=torch.uint8)
    row = 1
    for i, (s, n) in enumerate(zip(samples, counts)):
        boxes[i, :n] = s["boxes"].float()
        labels[i, :n] = s["labels"]
        valid[i, :n] = True
        rows[i, :n] = torch.arange(row, row + n)
        masks[row:row + n, :s["masks"].shape[-2], :s["masks"].shape[-1]] = s["masks"]
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
