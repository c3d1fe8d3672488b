"""data/batch.py: the collated batch's layout, the canvas buckets, the one move to the device, and
that the model gives the same losses from a collated batch as from the list of samples."""
from __future__ import annotations

import pickle

import pytest
import torch

from mpirun_kit.maskrcnn.config import resolve_config
from mpirun_kit.maskrcnn.data.batch import Collate, canvas_shape, collate, is_batch, to_device
from mpirun_kit.maskrcnn.data.coco import CocoDataset
from mpirun_kit.maskrcnn.data.masks import GT_MASK_SIZE
from mpirun_kit.maskrcnn.modeling.meta_arch import build_model


def _sample(h, w, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    boxes = torch.tensor([[1.0, 2.0, 5.0, 7.0]] * n)
    return {"image": torch.randint(1, 255, (3, h, w), dtype=torch.uint8, generator=g), "boxes": boxes,
            "labels": torch.arange(1, n + 1), "masks": torch.ones((n, h, w), dtype=torch.uint8),
            "seed": seed, "image_id": seed + 10, "orig_size": (2 * h, 2 * w), "skipped": []}


def test_collate_pads_images_and_targets_into_one_batch():
    b = collate([_sample(40, 50, 2, seed=1), _sample(33, 70, 3, seed=2)], canvas_multiple=32)
    assert b["images"].shape == (2, 3, 64, 96) and b["images"].dtype == torch.uint8
    assert b["image_sizes"] == [(40, 50), (33, 70)]
    assert torch.equal(b["images"][1, :, :33, :70], _sample(33, 70, 3, seed=2)["image"])
    assert b["images"][0, :, 40:].abs().sum() == 0 and b["images"][0, :, :, 50:].abs().sum() == 0
    assert b["boxes"].shape == (2, 3, 4) and b["valid"].tolist() == [[True, True, False], [True, True, True]]
    assert b["labels"].tolist() == [[1, 2, 0], [1, 2, 3]] and b["seeds"].tolist() == [1, 2]
    # every GT mask packed once behind the all-zero padding row 0, at the rows mask_rows names
    # (full-frame masks are cut to their boxes' grids: data/masks.py)
    assert b["masks"].shape == (6, GT_MASK_SIZE, GT_MASK_SIZE) and b["masks"][0].sum() == 0
    assert b["mask_rows"].tolist() == [[1, 2, 0], [3, 4, 5]]
    assert b["masks"][1:].all()  # each sample's mask covers its whole box
    assert b["canvas"] == (64, 96) and "src_sizes" not in b  # nothing left to resize or flip
    assert [m["image_id"] for m in b["meta"]] == [11, 12] and b["meta"][0]["orig_size"] == (80, 100)
    assert is_batch(b) and not is_batch([_sample(8, 8, 1)])


def test_eval_samples_collate_without_targets():
    s = {k: v for k, v in _sample(20, 30, 1).items() if k not in ("boxes", "labels", "masks")}
    b = collate([s])
    assert set(b) == {"images", "image_sizes", "canvas", "meta"}


def test_images_still_to_resize_or_flip_travel_as_decoded_with_their_sizes():
    a = _sample(20, 30, 1) | {"size": (40, 60), "flip": True}
    b = collate([a, _sample(20, 30, 1, seed=1)], canvas_multiple=32)
    assert b["images"].shape == (2, 3, 32, 32) and b["image_sizes"] == [(40, 60), (20, 30)]
    assert b["src_sizes"] == [(20, 30), (20, 30)] and b["flips"] == [True, False] and b["canvas"] == (64, 64)


def test_the_model_resizes_flips_and_normalises_on_the_device_as_pil_would():
    """MaskRCNN.preprocess: the decoded image, resized (bilinear, antialiased) and flipped, matches
    PIL's resize of the same pixels to within rounding; the padding is 0 after normalisation."""
    import numpy as np
    from PIL import Image

    cfg, _ = resolve_config("demo")
    model = build_model(cfg.model, 32)
    g = torch.Generator().manual_seed(3)
    img = torch.nn.functional.interpolate(torch.rand(1, 3, 6, 8, generator=g) * 255, size=(60, 80),
                                          mode="bilinear").round().to(torch.uint8)[0]
    for size in [(45, 60), (90, 120)]:
        batch = collate([{"image": img, "size": size, "flip": True}], 32)
        got = model.preprocess(batch)[0]
        pil = np.asarray(Image.fromarray(img.permute(1, 2, 0).numpy()).resize(size[::-1], Image.BILINEAR))
        want = (torch.from_numpy(pil.copy()).permute(2, 0, 1).float().flip(-1) - model.pixel_mean) / model.pixel_std
        assert got.shape[-2:] == batch["canvas"]
        assert (got[:, :size[0], :size[1]] - want).abs().max() < 2.5 / float(model.pixel_std.min())
        assert got[:, size[0]:].abs().sum() == 0 and got[:, :, size[1]:].abs().sum() == 0
    model.channels_last = True  # the GPU preset: the canvas is made in the backbone's layout, no extra copy
    got_cl = model.preprocess(batch)
    assert got_cl.is_contiguous(memory_format=torch.channels_last) and torch.equal(got_cl, model.preprocess(batch))
    model.channels_last = False
    assert torch.equal(got_cl.contiguous(), model.preprocess(batch))


@pytest.mark.parametrize("multiple,expected", [(32, (832, 1216)), (128, (896, 1280))])
def test_canvas_is_rounded_up_to_the_bucket(multiple, expected):
    assert canvas_shape([(800, 1201), (801, 1100)], multiple) == expected


def test_canvas_buckets_bound_the_number_of_shapes():
    # every (short 640..800, long up to 1333) image pair lands on a handful of 128-px canvases
    sizes = [(h, w) for h in range(640, 801, 7) for w in range(h, 1334, 13)]
    assert len({canvas_shape([s], 128) for s in sizes}) <= 4 * 7
    assert len({canvas_shape([s], 32) for s in sizes}) > 4 * len({canvas_shape([s], 128) for s in sizes})


def test_collate_is_picklable_for_loader_workers():
    c = pickle.loads(pickle.dumps(Collate(128)))
    assert c([_sample(10, 10, 1)])["images"].shape == (1, 3, 128, 128)


def test_to_device_moves_tensors_and_keeps_host_values():
    b = to_device(collate([_sample(16, 16, 1)]), torch.device("meta"))
    assert b["images"].device.type == "meta" and b["boxes"].device.type == "meta"
    assert b["image_sizes"] == [(16, 16)] and b["meta"][0]["image_id"] == 10


def test_model_losses_are_the_same_from_a_batch_and_from_samples(shapes):
    cfg, _ = resolve_config("demo")
    ds = CocoDataset(shapes / "annotations/instances_train.json", shapes / "train", train=True, min_sizes=(96,),
                     max_size=128, flip_prob=0.0, num_classes=3)
    samples = [ds[(i, i)] for i in range(3)]
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.input.size_divisibility).train()
    from_list = model(samples)
    from_batch = model(Collate(cfg.input.size_divisibility)(samples))
    assert from_list.keys() == from_batch.keys()
    for k in from_list:
        assert torch.equal(from_list[k], from_batch[k]), k
