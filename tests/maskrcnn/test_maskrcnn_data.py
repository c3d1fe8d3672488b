"""Data: the synthetic generator, COCO loading errors, unreadable-image skipping, the samplers."""
from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from pycocotools import mask as mask_utils

from mpirun_kit.errors import SpecError
from mpirun_kit.maskrcnn.data.coco import AnnotationFileError, CocoDataset, ImageFileMissingError
from mpirun_kit.maskrcnn.data.masks import GT_MASK_SIZE
from mpirun_kit.maskrcnn.data.sampler import EvalBatchSampler, TrainBatchSampler
from mpirun_kit.maskrcnn.data.synthetic import write_shapes_dataset


def _ds(root, split="train", **kw):
    args = dict(train=split == "train", min_sizes=(96,), max_size=160)
    args.update(kw)
    return CocoDataset(root / "annotations" / f"instances_{split}.json", root / split, **args)


def test_synthetic_is_deterministic_and_has_polygons_rle_and_overlaps(tmp_path, shapes):
    write_shapes_dataset(tmp_path, n_train=24, n_val=8, size=96, seed=7)
    a = json.loads((tmp_path / "annotations/instances_train.json").read_text())
    b = json.loads((shapes / "annotations/instances_train.json").read_text())
    assert a == b
    assert (tmp_path / "train/train_000003.png").read_bytes() == (shapes / "train/train_000003.png").read_bytes()
    kinds = {type(x["segmentation"]).__name__ for x in a["annotations"]}
    assert kinds == {"list", "dict"}  # polygons (unoccluded) and RLE (occluded, visible part)
    assert {x["category_id"] for x in a["annotations"]} == {1, 2, 3}
    # occluded instances are exactly the overlapping ones: their visible area < their polygon's area
    rle = [x for x in a["annotations"] if isinstance(x["segmentation"], dict)]
    assert all(x["area"] == float(mask_utils.area(x["segmentation"])) for x in rle)
    assert len({(im["height"], im["width"]) for im in a["images"]}) > 1  # several aspect ratios


def _frame_masks(s):
    """A sample's box-local masks drawn back into its original image frame (data/masks.py)."""
    (h, w), (nh, nw) = s["orig_size"], s["size"]
    back = torch.tensor([w / nw, h / nh, w / nw, h / nh])
    return torch.stack([_draw(m, b * back, h, w) for m, b in zip(s["masks"], s["boxes"])])


def _draw(mask, box, h, w):
    """Nearest-cell lookup of a box-local grid at every pixel centre of an h x w frame."""
    s = mask.shape[-1]
    ys, xs = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
    u = ((xs - box[0]) / (box[2] - box[0]) * s).floor().long()
    v = ((ys - box[1]) / (box[3] - box[1]) * s).floor().long()
    inside = (u >= 0) & (u < s) & (v >= 0) & (v < s)
    return torch.where(inside, mask[v.clamp(0, s - 1), u.clamp(0, s - 1)], torch.zeros((), dtype=mask.dtype))


def test_train_sample_targets_match_annotations(shapes):
    """The worker ships the image as decoded (the device resizes it) with its target size, boxes in
    the resized frame, and each instance's mask on a grid spanning its box; drawn back into the
    original frame, every mask (polygon or RLE) agrees with pycocotools' own rasterisation."""
    ds = _ds(shapes, flip_prob=0.0)
    checked = {"list": 0, "dict": 0}
    for index in range(6):
        s = ds[(index, 0)]
        img = ds.coco.imgs[ds.ids[index]]
        anns = [a for a in ds.coco.imgToAnns[ds.ids[index]] if not a["iscrowd"]]
        scale = s["size"][0] / img["height"]
        assert s["image"].shape == (3, img["height"], img["width"]) and s["image"].dtype == torch.uint8
        assert s["size"] == (round(img["height"] * scale), round(img["width"] * scale)) and s["flip"] is False
        for k, a in enumerate(anns):
            x, y, w, h = a["bbox"]
            assert torch.allclose(s["boxes"][k], torch.tensor([x, y, x + w, y + h]) * scale, atol=1e-4)
        assert s["masks"].shape == (len(anns), GT_MASK_SIZE, GT_MASK_SIZE) and s["mask_frame"] == "box"
        assert s["labels"].tolist() == [a["category_id"] for a in anns]
        got = _frame_masks(s)
        for k, a in enumerate(anns):
            want = torch.from_numpy(ds.coco.annToMask(a)) > 0
            iou = (got[k].bool() & want).sum() / (got[k].bool() | want).sum()
            assert iou > 0.95, (index, k, float(iou))
            checked[type(a["segmentation"]).__name__] += 1
    assert checked["list"] and checked["dict"]  # both encodings were compared


def test_flip_mirrors_boxes_and_masks_and_asks_the_device_to_flip(shapes):
    plain, flipped = _ds(shapes, flip_prob=0.0)[0], _ds(shapes, flip_prob=1.0)[0]
    w = plain["size"][1]
    assert torch.equal(flipped["image"], plain["image"])  # the pixels flip on the device
    assert flipped["flip"] is True and plain["flip"] is False
    assert torch.equal(flipped["masks"], plain["masks"].flip(-1))
    assert torch.allclose(flipped["boxes"][:, [2, 0]], w - plain["boxes"][:, [0, 2]])


def test_jpeg_shrunk_to_half_or_less_decodes_scaled(tmp_path):
    """Where the resize halves the image or more, libjpeg-turbo's scaled decode (PIL draft) gives a
    smaller array (here 1/4, the resize's own scale); the target size and boxes follow the original frame."""
    import numpy as np
    from PIL import Image

    (tmp_path / "img").mkdir()
    Image.fromarray(np.full((400, 600, 3), 90, np.uint8)).save(tmp_path / "img/a.jpg", quality=90)
    ann = {"images": [{"id": 1, "file_name": "a.jpg", "height": 400, "width": 600}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "area": 100.0,
                            "bbox": [100, 100, 200, 100], "segmentation": [[100, 100, 300, 100, 300, 200, 100, 200]]}],
           "categories": [{"id": 1, "name": "box"}]}
    (tmp_path / "ann.json").write_text(json.dumps(ann))
    s = CocoDataset(tmp_path / "ann.json", tmp_path / "img", train=True, min_sizes=(100,), max_size=1000,
                    flip_prob=0.0)[0]
    assert s["image"].shape == (3, 100, 150) and s["orig_size"] == (400, 600) and s["size"] == (100, 150)
    assert torch.allclose(s["boxes"][0], torch.tensor([25.0, 25.0, 75.0, 50.0]))
    assert s["masks"][0].float().mean() > 0.95  # the rectangle fills its own box


@pytest.mark.parametrize("content,message", [
    (None, "does not exist; expected a COCO json"),
    ("", "is empty; expected a COCO json with 'images', 'annotations' and 'categories'"),
    ('{"images": [', "is not valid json (Expecting value at line 1 column 13); the file is corrupt or truncated"),
    ('{"images": []}', "missing or non-list key(s) annotations, categories"),
    ('[1, 2]', "expected a json object with 'images', 'annotations', 'categories', got list"),
    ('{"images": [], "annotations": [], "categories": []}', "lists no images"),
])
def test_bad_annotation_files_name_the_file(tmp_path, content, message):
    ann = tmp_path / "instances.json"
    if content is not None:
        ann.write_text(content)
    with pytest.raises(AnnotationFileError) as e:
        CocoDataset(ann, tmp_path, train=True, min_sizes=(96,), max_size=160)
    assert str(ann) in str(e.value) and message in str(e.value)


def test_missing_image_names_the_file(tmp_path, shapes):
    shutil.copytree(shapes, tmp_path / "d")
    (tmp_path / "d/train/train_000005.png").unlink()
    with pytest.raises(ImageFileMissingError) as e:
        _ds(tmp_path / "d")
    assert f"image file {tmp_path / 'd/train/train_000005.png'} (listed in " in str(e.value)
    assert "expected every image of the json under" in str(e.value)


def test_class_count_mismatch_says_how_to_fix(shapes):
    with pytest.raises(SpecError, match=r"has 3 categories but model.num_classes=80; set --set model.num_classes=3"):
        _ds(shapes, num_classes=80)


def test_unreadable_image_is_skipped_with_a_warning_and_recorded(tmp_path, shapes, caplog):
    shutil.copytree(shapes, tmp_path / "d")
    ds = _ds(tmp_path / "d")
    bad = tmp_path / "d/train" / ds.coco.imgs[ds.ids[2]]["file_name"]
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    with caplog.at_level(logging.WARNING):
        s = ds[(2, 0)]
    assert s["skipped"] == [str(bad)]
    assert s["image_id"] == ds.ids[3]  # the next readable image stands in
    assert f"skipping unreadable image {bad}" in caplog.text
    assert ds[(3, 0)]["skipped"] == []


def test_train_sampler_shards_evenly_groups_and_resumes():
    groups = [i % 3 == 0 for i in range(50)]
    samplers = [TrainBatchSampler([int(g) for g in groups], 4, rank=r, world_size=2, seed=3) for r in range(2)]
    b0, b1 = samplers[0].epoch_batches(0), samplers[1].epoch_batches(0)
    assert len(b0) == len(b1) > 0
    seen = [i for b in b0 + b1 for i, _ in b]
    assert len(seen) == len(set(seen))  # no image twice in an epoch
    assert all(len({groups[i] for i, _ in b}) == 1 for b in b0 + b1)  # one aspect group per batch
    assert samplers[0].epoch_batches(1) != b0  # reshuffled per epoch
    samplers[0].set_state(0, 2)
    assert list(samplers[0]) == b0[2:]  # resuming at batch 2 continues with exactly the rest
    assert b0 == TrainBatchSampler([int(g) for g in groups], 4, rank=0, world_size=2, seed=3).epoch_batches(0)


def test_eval_sampler_covers_each_image_once():
    parts = [list(EvalBatchSampler(11, 3, rank=r, world_size=3)) for r in range(3)]
    assert sorted(i for p in parts for b in p for i in b) == list(range(11))
