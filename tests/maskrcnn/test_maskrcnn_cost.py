"""mpirun_kit/maskrcnn/cost.py: the step cost model's numbers (meta device, no GPU needed).

The demo model keeps it fast; the head sizes come from its config, so the hand formulas below are
an independent check of what the counter charged to each component.
"""
from __future__ import annotations

import math

import pytest

from mpirun_kit.maskrcnn.config import resolve_config
from mpirun_kit.maskrcnn.cost import COMPONENTS, Peak, format_cost, step_cost, with_mask_rois


@pytest.fixture(scope="module")
def demo():
    cfg, _ = resolve_config("demo")
    assert cfg.model.roi_heads.mask_rois_per_image == 4 and cfg.solver.ims_per_gpu == 4
    return cfg


@pytest.fixture(scope="module")
def base(demo):
    return step_cost(demo)


@pytest.fixture(scope="module")
def two_slots(demo):
    return step_cost(with_mask_rois(demo, 2))


def _mask_head_flops_per_slot(cfg) -> float:
    """Forward FLOPs of one mask-head RoI: the convs at the pool size, the 2x2 deconv, the 1x1 predictor."""
    rh, c_in = cfg.model.roi_heads, cfg.model.fpn_channels
    p, d = rh.mask_pool_size, rh.mask_conv_dim
    convs = sum(2 * 9 * (c_in if i == 0 else d) * d * p * p for i in range(rh.mask_num_convs))
    deconv = 2 * d * d * 4 * p * p
    pred = 2 * d * cfg.model.num_classes * (2 * p) ** 2
    return convs + deconv + pred


def test_mask_head_flops_follow_the_slot_count(demo, base, two_slots):
    """Forward + both backward products (3x the forward) per slot, slots = mask_rois_per_image x images;
    the other components do not move."""
    small, large = two_slots, base
    assert (small.mask_slots, large.mask_slots) == (8, 16)
    for cost in (small, large):
        expected = 3 * cost.mask_slots * _mask_head_flops_per_slot(demo) / cost.images
        assert cost.flops["mask_head"] == pytest.approx(expected, rel=1e-9)
        assert cost.bytes["mask_head"] > 0
    assert large.bytes["mask_head"] > small.bytes["mask_head"]
    for c in ("backbone", "rpn", "box_head"):
        assert small.flops[c] == large.flops[c], c


def test_box_head_flops_follow_the_sampled_rois(demo, base):
    rh = demo.model.roi_heads
    per_roi = 2 * (demo.model.fpn_channels * rh.box_pool_size ** 2 * rh.fc_dim + rh.fc_dim * rh.fc_dim
                   + rh.fc_dim * (demo.model.num_classes + 1) + rh.fc_dim * 4 * demo.model.num_classes)
    assert base.flops["box_head"] == pytest.approx(3 * rh.batch_size_per_image * per_roi, rel=1e-9)


def test_components_add_up_to_the_counters_total(base):
    """Every counted op lands in exactly one component: the sum equals FlopCounterMode's own total."""
    cost = base
    assert cost.total_flops * cost.images == pytest.approx(cost.counter_total_flops, rel=1e-12)
    assert all(cost.flops[c] >= 0 for c in COMPONENTS)
    assert cost.flops["backbone"] > cost.flops["rpn"] > 0 and cost.bytes["optimizer"] > 0


def test_bytes_follow_the_float_width(demo, base):
    """The backbone moves floating-point tensors but for the stem max-pool's int64 indices: counting
    floats at 4 bytes instead of 2 almost doubles its bytes; FLOPs do not change."""
    half, full = base, step_cost(demo, float_bytes=4)
    assert 1.95 < full.bytes["backbone"] / half.bytes["backbone"] < 2.0
    assert full.total_bytes > 1.5 * half.total_bytes
    assert full.flops == half.flops


def test_roofline_is_bandwidth_bound_without_a_flop_limit(demo, two_slots):
    """With unlimited FLOP/s each op costs bytes / bandwidth, so img/s = bandwidth / bytes per image."""
    peak = Peak("test", math.inf, 1e12)
    cost = step_cost(demo, peak=peak)
    assert cost.images_per_s == pytest.approx(1e12 / cost.total_bytes, rel=1e-9)
    table = format_cost(cost, before=two_slots)
    assert "mask_head" in table and f"at most {cost.images_per_s:.0f} img/s per GPU (bar: 130 img/s per GPU" in table
    assert f"no launch overhead ({cost.ops} ops per step)" in table and cost.ops > 100
