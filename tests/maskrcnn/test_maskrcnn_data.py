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


def test_train_sample_targets_match_annotations(shapes):
    ds = _ds(shapes, flip_prob=0.0)
    s = ds[0]
    img = ds.coco.imgs[ds.ids[0]]
    anns = [a for a in ds.coco.imgToAnns[ds.ids[0]] if not a["iscrowd"]]
    scale = s["size"][0] / img["height"]
    assert s["image"].shape == (3, *s["size"]) and s["image"].dtype == torch.uint8
    x, y, w, h = anns[0]["bbox"]
    assert torch.allclose(s["boxes"][0], torch.tensor([x, y, x + w, y + h]) * scale, atol=1e-4)
    assert s["masks"].shape == (len(anns), *s["size"]) and s["labels"].tolist() == [a["category_id"] for a in anns]
    # the resized mask lies inside its (resized) box
    ys, xs = torch.nonzero(s["masks"][0], as_tuple=True)
    assert xs.min() >= s["boxes"][0, 0] - 1 and xs.max() <= s["boxes"][0, 2] + 1


def test_flip_mirrors_image_boxes_and_masks(shapes):
    plain, flipped = _ds(shapes, flip_prob=0.0)[0], _ds(shapes, flip_prob=1.0)[0]
    w = plain["size"][1]
    assert torch.equal(flipped["image"], plain["image"].flip(-1))
    assert torch.equal(flipped["masks"], plain["masks"].flip(-1))
    assert torch.allclose(flipped["boxes"][:, [2, 0]], w - plain["boxes"][:, [0, 2]])


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
