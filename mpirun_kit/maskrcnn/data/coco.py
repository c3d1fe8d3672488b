"""COCO-format dataset: annotation json + image folder -> per-image training/eval samples.

``CocoDataset`` reads the json with pycocotools (polygon and RLE segmentations; crowd regions are
ignored), checks up front that every image file exists (a missing file is a configuration error
worth failing on before hours of training), and at ``__getitem__`` time decodes one image (no
larger than its resize needs: libjpeg-turbo's scaled decode), draws its size (shorter side to a
drawn min size, longer side capped) and flip, and rasterises each instance's mask on a small grid
spanning its box (data/masks.py).  The resize, flip and normalisation of the pixels run on the
device (``MaskRCNN.preprocess``), so a worker's per-image cost is little more than the decode.
The random choices come
from the per-item seed the sampler hands in, so a resumed run sees the same augmentations.  An image
that exists but cannot be decoded is skipped with a warning: the next readable image is used in
its place (batch sizes stay equal across DDP ranks) and the sample records the skipped file so the
trainer can count and report it.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import random
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from ...errors import SpecError
from .masks import GT_MASK_SIZE, crop_to_boxes

log = logging.getLogger(__name__)


class AnnotationFileError(SpecError):
    """The annotation json is missing, empty, not json, or not COCO-shaped."""


class ImageFileMissingError(SpecError):
    """An image listed in the annotation file does not exist on disk."""


def load_coco_json(path: str | os.PathLike) -> dict[str, Any]:
    """Read and shape-check a COCO annotation file, naming the file in every error."""
    path = Path(path)
    if not path.is_file():
        raise AnnotationFileError(f"annotation file {path} does not exist; expected a COCO json "
                                  "(pass --data-dir, or --synthetic-if-missing to generate the demo set)")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise AnnotationFileError(f"annotation file {path} is empty; expected a COCO json with "
                                  "'images', 'annotations' and 'categories' (re-copy or regenerate it)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnnotationFileError(f"annotation file {path} is not valid json ({exc.msg} at line {exc.lineno} "
                                  f"column {exc.colno}); the file is corrupt or truncated: re-copy it") from exc
    if not isinstance(data, dict):
        raise AnnotationFileError(f"annotation file {path}: expected a json object with 'images', "
                                  f"'annotations', 'categories', got {type(data).__name__}")
    missing = [k for k in ("images", "annotations", "categories") if not isinstance(data.get(k), list)]
    if missing:
        raise AnnotationFileError(f"annotation file {path}: missing or non-list key(s) {', '.join(missing)}; "
                                  "expected a COCO instances json")
    if not data["images"]:
        raise AnnotationFileError(f"annotation file {path} lists no images; expected at least one")
    if not data["categories"]:
        raise AnnotationFileError(f"annotation file {path} lists no categories; expected at least one")
    return data


def make_coco_api(data: dict[str, Any]):
    """A pycocotools COCO built from an already-loaded dict (no file I/O, no prints)."""
    from pycocotools.coco import COCO

    coco = COCO()
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress lines
        coco.createIndex()
    return coco


def resize_scale(h: int, w: int, min_size: int, max_size: int) -> float:
    """Scale that makes the shorter side ``min_size`` unless the longer side would pass ``max_size``."""
    scale = min_size / min(h, w)
    if max(h, w) * scale > max_size:
        scale = max_size / max(h, w)
    return scale


class CocoDataset:
    """Map-style dataset over one COCO split.

    Args:
        ann_file: COCO instances json.
        image_dir: folder the json's ``file_name`` values are relative to.
        train: training mode: drop images without usable instances, build targets, augment.
        min_sizes: shorter-side sizes; one is drawn per image in training, the first is used in eval.
        max_size: cap on the longer side.
        flip_prob: horizontal flip probability (training only).
        num_classes: if given, must equal the number of categories in the file.
        mask_size: side of each instance's box-local mask grid (data/masks.py).
    Raises:
        AnnotationFileError, ImageFileMissingError, SpecError (class count mismatch).
    """

    def __init__(self, ann_file: str | os.PathLike, image_dir: str | os.PathLike, *, train: bool,
                 min_sizes: Sequence[int], max_size: int, flip_prob: float = 0.5,
                 num_classes: int | None = None, mask_size: int = GT_MASK_SIZE):
        self.ann_file = Path(ann_file)
        self.image_dir = Path(image_dir)
        self.train = train
        self.min_sizes = tuple(min_sizes)
        self.max_size = max_size
        self.flip_prob = flip_prob if train else 0.0
        self.mask_size = mask_size
        self.coco = make_coco_api(load_coco_json(self.ann_file))
        cat_ids = sorted(self.coco.getCatIds())
        if num_classes is not None and len(cat_ids) != num_classes:
            raise SpecError(f"annotation file {self.ann_file} has {len(cat_ids)} categories but "
                            f"model.num_classes={num_classes}; set --set model.num_classes={len(cat_ids)}")
        self.cat_to_label = {c: i + 1 for i, c in enumerate(cat_ids)}
        self.label_to_cat = {i + 1: c for i, c in enumerate(cat_ids)}
        ids = sorted(self.coco.imgs)
        if train:
            ids = [i for i in ids if any(self._usable(a) for a in self.coco.imgToAnns.get(i, []))]
            if not ids:
                raise AnnotationFileError(f"annotation file {self.ann_file}: no image has a usable (non-crowd, "
                                          "non-empty) instance; expected a training set with annotations")
        self.ids = ids
        missing = [self.coco.imgs[i]["file_name"] for i in ids
                   if not (self.image_dir / self.coco.imgs[i]["file_name"]).is_file()]
        if missing:
            raise ImageFileMissingError(
                f"image file {self.image_dir / missing[0]} (listed in {self.ann_file}) does not exist"
                + (f", nor do {len(missing) - 1} other listed images" if len(missing) > 1 else "")
                + f"; expected every image of the json under {self.image_dir} (check data.*_images / --data-dir)")
        #: 0 = landscape or square, 1 = portrait: the aspect-ratio grouping key
        self.aspect_groups = [int(self.coco.imgs[i]["height"] > self.coco.imgs[i]["width"]) for i in ids]

    @staticmethod
    def _usable(a: dict) -> bool:
        return not a.get("iscrowd", 0) and a["bbox"][2] >= 1 and a["bbox"][3] >= 1

    def __len__(self) -> int:
        return len(self.ids)

    def _read(self, index: int) -> np.ndarray | None:
        """The image as HWC uint8 RGB, decoded no larger than needed (None: unreadable, skipped).

        Where the image will be shrunk to half or less, libjpeg-turbo's DCT-domain scaled decode
        (PIL's ``draft``) returns it at 1/2, 1/4 or 1/8 size, at a fraction of a full decode's
        cost; the device resizes the rest of the way (``MaskRCNN.preprocess``).
        """
        info = self.coco.imgs[self.ids[index]]
        path = self.image_dir / info["file_name"]
        try:
            with Image.open(path) as im:
                if im.format == "JPEG":
                    h, w = im.size[1], im.size[0]
                    # the smallest size this image is resized to; draft keeps at least it
                    scale = min(resize_scale(h, w, m, self.max_size) for m in self.min_sizes)
                    if scale <= 0.5:
                        im.draft("RGB", (int(math.ceil(w * scale)), int(math.ceil(h * scale))))
                return np.array(im.convert("RGB"))  # writable: torch.from_numpy takes it as is
        except (OSError, ValueError, SyntaxError) as exc:  # PIL raises these for corrupt/truncated files
            log.warning("skipping unreadable image %s (%s); using the next image in its place", path, exc)
            return None

    def __getitem__(self, item: int | tuple[int, int]) -> dict[str, Any]:
        index, seed = item if isinstance(item, tuple) else (item, 0)
        skipped: list[str] = []
        for _ in range(len(self.ids)):
            arr = self._read(index)
            if arr is not None:
                break
            skipped.append(str(self.image_dir / self.coco.imgs[self.ids[index]]["file_name"]))
            index = (index + 1) % len(self.ids)
        else:
            raise ImageFileMissingError(f"no image listed in {self.ann_file} could be read from {self.image_dir}")
        sample = self._transform(index, arr, random.Random(seed))
        sample["skipped"] = skipped
        sample["seed"] = seed  # keys the model's per-image anchor/RoI sampling (modeling/sampling.py)
        return sample

    def _transform(self, index: int, arr: np.ndarray, rng: random.Random) -> dict[str, Any]:
        """The decoded image as it is (CHW view), its target size and flip, and box-local targets.

        The resize, flip and normalisation run on the device (``MaskRCNN.preprocess``): the worker
        only decodes, so its per-image cost is the JPEG decode and a few small rasterisations.
        """
        img_id = self.ids[index]
        info = self.coco.imgs[img_id]
        h, w = int(info["height"]), int(info["width"])
        if arr.shape[:2] != (h, w) and not self._draft_shape_ok(arr.shape[:2], h, w):
            h, w = arr.shape[:2]  # the json's size is wrong: trust the decoded pixels
        min_size = rng.choice(self.min_sizes) if self.train else self.min_sizes[0]
        scale = resize_scale(h, w, min_size, self.max_size)
        nh, nw = int(round(h * scale)), int(round(w * scale))
        flip = self.train and rng.random() < self.flip_prob
        sample: dict[str, Any] = {
            # HWC -> CHW as a view: the collate copies it once, into the batch canvas
            "image": torch.from_numpy(arr).permute(2, 0, 1),
            "image_id": img_id, "orig_size": (h, w), "size": (nh, nw), "flip": flip,
        }
        if not self.train:
            return sample
        anns = [a for a in self.coco.imgToAnns.get(img_id, []) if self._usable(a)]
        raw = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        raw[:, 2:] += raw[:, :2]  # xywh -> xyxy, original frame
        masks = torch.from_numpy(np.stack([self._box_mask(a, b, h, w) for a, b in zip(anns, raw.tolist())])
                                 if anns else np.zeros((0, self.mask_size, self.mask_size), np.uint8))
        boxes = raw * torch.tensor([nw / w, nh / h, nw / w, nh / h])
        if flip:
            boxes = torch.stack([nw - boxes[:, 2], boxes[:, 1], nw - boxes[:, 0], boxes[:, 3]], dim=1)
            masks = masks.flip(-1)
        sample["boxes"] = boxes
        sample["labels"] = torch.tensor([self.cat_to_label[a["category_id"]] for a in anns], dtype=torch.int64)
        sample["masks"] = masks
        sample["mask_frame"] = "box"  # masks span their boxes (data/masks.py), not the image
        return sample

    @staticmethod
    def _draft_shape_ok(shape: tuple[int, int], h: int, w: int) -> bool:
        """True when ``shape`` is a scaled decode (1/2, 1/4, 1/8) of an h x w JPEG."""
        return any(shape == (-(-h // d), -(-w // d)) for d in (2, 4, 8))

    def _box_mask(self, ann: dict, box: list[float], h: int, w: int) -> np.ndarray:
        """The instance's mask on a ``mask_size`` grid spanning ``box`` (original frame), uint8."""
        from pycocotools import mask as mask_utils

        s = self.mask_size
        x0, y0, x1, y1 = box
        seg = ann["segmentation"]
        if isinstance(seg, list):  # polygons: rasterised straight into the box's grid
            sx, sy = s / max(x1 - x0, 1e-6), s / max(y1 - y0, 1e-6)
            polys = []
            for p in seg:
                q = np.asarray(p, dtype=np.float64).reshape(-1, 2)
                if len(q) < 3:
                    continue
                polys.append(np.stack([(q[:, 0] - x0) * sx, (q[:, 1] - y0) * sy], 1).ravel().tolist())
            if not polys:
                return np.zeros((s, s), np.uint8)
            return mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polys, s, s)))
        full = torch.from_numpy(self.coco.annToMask(ann))  # RLE: decoded in its frame, then cut out
        return crop_to_boxes(full[None], torch.tensor([box]), s)[0].numpy()


def collate(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep samples as a list: the model pads them to one tensor (on its device) itself."""
    return list(batch)
