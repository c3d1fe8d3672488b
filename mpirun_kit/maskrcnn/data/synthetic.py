"""Synthetic COCO-format shapes dataset: the demo's and the tests' stand-in for COCO.

``write_shapes_dataset(root, ...)`` writes ``root/{train,val}/*.png`` and
``root/annotations/instances_{train,val}.json`` that coco.py then reads exactly like COCO.
Three classes (circle, square, triangle), 1-4 instances per image in random colours on a noisy
background, several image shapes (so aspect-ratio grouping has work to do), and overlapping
instances: an instance drawn over by a later one is annotated by its *visible* region as RLE,
an unoccluded one by its polygon -- so both COCO segmentation encodings are exercised.  Pixels are
painted from the same pycocotools rasterisation the evaluator uses, so GT and image agree exactly.
Everything is a function of ``seed``; annotation files are written last and atomically, so their
presence means the dataset is complete.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from ...core.files import write_json_atomic

CATEGORIES = ({"id": 1, "name": "circle"}, {"id": 2, "name": "square"}, {"id": 3, "name": "triangle"})
#: an occluded instance must keep at least this fraction of its pixels visible
MIN_VISIBLE = 0.6


def _polygon(kind: int, cx: float, cy: float, r: float, angle: float) -> list[float]:
    if kind == 1:
        n, rr = 24, r
    elif kind == 2:
        n, rr = 4, r * math.sqrt(2) * 0.75
    else:
        n, rr = 3, r * 1.1
    pts = []
    for k in range(n):
        a = angle + 2 * math.pi * k / n
        pts += [cx + rr * math.cos(a), cy + rr * math.sin(a)]
    return pts


def _raster(poly: list[float], h: int, w: int) -> np.ndarray:
    rles = mask_utils.frPyObjects([poly], h, w)
    return mask_utils.decode(mask_utils.merge(rles)).astype(bool)


def make_image(rng: np.random.Generator, size: int) -> tuple[np.ndarray, list[dict]]:
    """One image (H, W, 3 uint8) and its annotations (without ids)."""
    w, h = [(size, size), (size, int(size * 0.75)), (int(size * 0.75), size)][int(rng.integers(3))]
    img = (rng.normal(0, 8, (h, w, 3)) + rng.integers(10, 70, 3)).clip(0, 255)
    visible: list[np.ndarray] = []
    objs: list[dict] = []
    for _ in range(int(rng.integers(1, 5))):
        for _try in range(20):
            kind = int(rng.integers(1, 4))
            r = float(rng.uniform(0.08, 0.22)) * min(h, w)
            cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
            if kind == 2:
                angle = math.pi / 4 + float(rng.uniform(-0.3, 0.3))
            else:
                angle = float(rng.uniform(0, 2 * math.pi))
            poly = _polygon(kind, cx, cy, r, angle)
            m = _raster(poly, h, w)
            if m.sum() < 30:
                continue
            # would this instance hide too much of an earlier one?
            if all((v & ~m).sum() >= MIN_VISIBLE * o["full_area"] for v, o in zip(visible, objs)):
                break
        else:
            continue
        visible = [v & ~m for v in visible]
        visible.append(m)
        objs.append({"kind": kind, "poly": poly, "full_area": int(m.sum())})
        color = rng.integers(90, 256, 3)
        img[m] = color + rng.normal(0, 6, (int(m.sum()), 3))
    anns = []
    for v, o in zip(visible, objs):
        ys, xs = np.nonzero(v)
        if v.sum() == o["full_area"]:
            seg: object = [[round(c, 2) for c in o["poly"]]]
        else:
            rle = mask_utils.encode(np.asfortranarray(v.astype(np.uint8)))
            seg = {"size": [h, w], "counts": rle["counts"].decode("ascii")}
        anns.append({
            "category_id": o["kind"], "segmentation": seg, "area": float(v.sum()), "iscrowd": 0,
            "bbox": [float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1)],
        })
    return img.clip(0, 255).astype(np.uint8), anns


def write_split(root: Path, split: str, n: int, size: int, seed: int,
                ann_path: Path | None = None, image_dir: Path | None = None) -> Path:
    """Write ``n`` images of one split (default layout ``root/<split>/``,
    ``root/annotations/instances_<split>.json``); returns the annotation file path."""
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    image_dir = image_dir or root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(n):
        img, anns = make_image(rng, size)
        name = f"{split}_{i:06d}.png"
        Image.fromarray(img).save(image_dir / name)
        images.append({"id": i + 1, "file_name": name, "height": img.shape[0], "width": img.shape[1]})
        for a in anns:
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, **a})
    ann_path = ann_path or root / "annotations" / f"instances_{split}.json"
    write_json_atomic(ann_path, {"images": images, "annotations": annotations,
                                  "categories": [dict(c) for c in CATEGORIES]})
    return ann_path


def write_shapes_dataset(root: str | os.PathLike, n_train: int = 600, n_val: int = 100,
                         size: int = 160, seed: int = 2026) -> tuple[Path, Path]:
    """Write the train and val splits (val last); returns their annotation paths."""
    root = Path(root)
    return (write_split(root, "train", n_train, size, seed), write_split(root, "val", n_val, size, seed))
