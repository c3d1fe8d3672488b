"""benchmarks/bench_vs_torchvision.py, the parts that need no torchvision: the shared inputs and our
side's build (the r50_fpn_1x structure on the CPU with the recipe's sampling sizes).  The timing
itself runs in .venv-cuda (docs/benchmarks.md)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_vs_torchvision as bench  # noqa: E402


def test_the_two_images_have_eight_boxes_with_masks_inside_them():
    samples = bench.make_samples()
    assert len(samples) == 2
    for s in samples:
        assert s["image"].shape == (3, 512, 768) and s["image"].dtype == torch.uint8
        assert s["boxes"].shape == (8, 4) and s["masks"].shape == (8, 512, 768) and s["labels"].shape == (8,)
        for (x1, y1, x2, y2), m in zip(s["boxes"].tolist(), s["masks"]):
            ys, xs = torch.nonzero(m, as_tuple=True)
            assert ys.numel() > 0 and x1 <= xs.min() and xs.max() <= x2 and y1 <= ys.min() and ys.max() <= y2
    assert torch.equal(bench.make_samples()[1]["image"], samples[1]["image"])  # the same inputs every run


def test_our_side_is_the_recipe_on_the_cpu(tmp_path):
    t = bench.build_ours("cpu", tmp_path)
    c = t.cfg
    assert (c.device, c.solver.amp, c.solver.channels_last, c.model.backbone.weights) == ("cpu", "none", False, "")
    assert (c.model.num_classes, c.solver.ims_per_gpu, c.model.backbone.freeze_at, c.model.backbone.norm) == (80, 2, 2, "frozen_bn")
    r, h = c.model.rpn, c.model.roi_heads
    assert (r.pre_nms_topk_train, r.post_nms_topk_train, r.batch_size_per_image, r.positive_fraction) == (2000, 1000, 256, 0.5)
    assert (h.batch_size_per_image, h.positive_fraction, h.detections_per_img) == (512, 0.25, 100)


def test_the_score_threshold_reaches_our_side(tmp_path):
    """--score-thresh (both sides; 0: 100 detections per image each, the same inference work)."""
    assert bench.build_ours("cpu", tmp_path).cfg.model.roi_heads.score_thresh_test == 0.05  # the recipe's
    assert bench.build_ours("cpu", tmp_path / "z", 0.0).cfg.model.roi_heads.score_thresh_test == 0.0


def test_another_seed_gives_other_inputs_of_the_same_kind():
    """--seed: a second set of inputs (the run of record is owed one)."""
    a, b = bench.make_samples(0), bench.make_samples(1)
    assert not torch.equal(a[0]["image"], b[0]["image"]) and not torch.equal(a[0]["boxes"], b[0]["boxes"])
    assert [s["boxes"].shape for s in b] == [(8, 4), (8, 4)]
    assert bench.build_parser().parse_args(["--seed", "1"]).seed == 1
    assert bench.build_parser().parse_args([]).seed == 0
