"""config.py: defaults are the standard recipe, presets are data, --set wins, errors say what to do."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.maskrcnn.config import (PRESETS, Config, ConfigError, RPNConfig, SolverConfig, config_from_dict,
                                        config_to_dict, lr_at, parse_overrides, resolve_config, set_key)


def test_defaults_are_the_r50_fpn_1x_recipe():
    c = Config()
    assert c.solver == SolverConfig(base_lr=0.02, reference_batch=16, ims_per_gpu=2, momentum=0.9, weight_decay=1e-4,
                                    max_iter=90000, steps=(2 / 3, 8 / 9), gamma=0.1, warmup_iters=1000,
                                    warmup_factor=0.001, checkpoint_period=5000, amp="none", channels_last=False,
                                    clip_grad_norm=0.0)
    assert c.model.rpn == RPNConfig(anchor_sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1.0, 2.0),
                                    pre_nms_topk_train=2000, pre_nms_topk_test=1000, post_nms_topk_train=1000,
                                    post_nms_topk_test=1000, nms_thresh=0.7, min_size=0.0, fg_iou_thresh=0.7,
                                    bg_iou_thresh=0.3, batch_size_per_image=256, positive_fraction=0.5)
    r = c.model.roi_heads
    assert (r.box_pool_size, r.mask_pool_size, r.sampling_ratio, r.mask_resolution, r.batch_size_per_image,
            r.positive_fraction, r.fc_dim, r.mask_num_convs) == (7, 14, 2, 28, 512, 0.25, 1024, 4)
    assert (c.model.backbone.depth, c.model.backbone.norm, c.model.backbone.freeze_at) == ((3, 4, 6, 3), "frozen_bn", 2)
    assert (c.input.min_size_train, c.input.max_size_train, c.input.size_divisibility) == ((800,), 1333, 32)


def test_preset_then_user_override_wins_and_is_reported():
    cfg, notes = resolve_config("demo", parse_overrides(["solver.base_lr=0.01", "solver.max_iter=7", "seed=3"]))
    assert (cfg.solver.base_lr, cfg.solver.max_iter, cfg.seed) == (0.01, 7, 3)
    assert cfg.model.num_classes == 3  # preset value kept
    assert notes == ["solver.base_lr: preset 'demo' says 0.02, user value 0.01 wins",
                     "solver.max_iter: preset 'demo' says 450, user value 7 wins"]


def test_tuple_and_bool_values_parse():
    cfg = set_key(Config(), "input.min_size_train", "640,672")
    cfg = set_key(cfg, "model.rpn.aspect_ratios", "[1, 2]")
    cfg = set_key(cfg, "solver.channels_last", "true")
    assert (cfg.input.min_size_train, cfg.model.rpn.aspect_ratios, cfg.solver.channels_last) == ((640, 672), (1.0, 2.0), True)


def test_round_trip_through_dict():
    cfg, _ = resolve_config("demo", {"solver.steps": "0.5,0.75"})
    assert config_from_dict(config_to_dict(cfg)) == cfg


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_resolves(preset):
    cfg, notes = resolve_config(preset)
    assert isinstance(cfg, Config) and notes == []


def test_lr_schedule_scales_warms_up_and_steps():
    s = SolverConfig(base_lr=0.02, reference_batch=16, max_iter=900, steps=(2 / 3, 8 / 9), warmup_iters=100,
                     warmup_factor=0.001)
    assert lr_at(s, 0, 16) == pytest.approx(0.02 * 0.001)
    assert lr_at(s, 50, 16) == pytest.approx(0.02 * (0.001 * 0.5 + 0.5))
    assert lr_at(s, 100, 8) == pytest.approx(0.01)  # half the global batch -> half the LR
    assert lr_at(s, 600, 16) == pytest.approx(0.002)
    assert lr_at(s, 800, 16) == pytest.approx(0.0002)


@pytest.mark.parametrize("call,message", [
    (lambda: resolve_config("r101"), "unknown config preset 'r101'; expected one of: demo, r50_fpn_1x"),
    (lambda: set_key(Config(), "solver.base_lrr", "0.1"), "unknown config key 'solver.base_lrr': no 'base_lrr' in solver"),
    (lambda: set_key(Config(), "solver.max_iter", "lots"), "config key 'solver.max_iter': expected int (like 90000), got 'lots'"),
    (lambda: set_key(Config(), "solver.max_iter", "1.5"), "expected int (like 90000), got 1.5"),
    (lambda: set_key(Config(), "solver", "1"), "config key 'solver' is a section; set one of its keys"),
    (lambda: set_key(Config(), "seed.x", "1"), "seed is a value, not a section"),
    (lambda: parse_overrides(["solver.base_lr"]), "--set 'solver.base_lr': expected KEY=VALUE"),
    (lambda: resolve_config("demo", {"solver.amp": "fp8"}), "solver.amp='fp8': expected 'none', 'bf16' or 'fp16'"),
    (lambda: resolve_config("demo", {"model.backbone.depth": "1,1"}), "model.backbone.depth=(1, 1): expected 4 stages"),
    (lambda: resolve_config("demo", {"model.backbone.norm": "bn"}), "model.backbone.norm='bn': expected 'frozen_bn' or 'gn'"),
    (lambda: resolve_config("demo", {"model.rpn.anchor_sizes": "8,16"}), "expected 5 sizes, one per level P2..P6"),
    (lambda: resolve_config("demo", {"solver.steps": "1.5"}), "solver.steps=(1.5,): expected fractions of max_iter"),
    (lambda: resolve_config("demo", {"backend": "mpi"}), "backend='mpi': expected 'auto', 'gloo', 'nccl' or 'horovod'"),
    (lambda: resolve_config("demo", {"device": "tpu"}), "device='tpu': expected 'auto', 'cpu' or 'cuda'"),
    (lambda: resolve_config("demo", {"model.num_classes": "0"}), "model.num_classes=0: expected >= 1"),
    (lambda: resolve_config("demo", {"solver.ims_per_gpu": "0"}), "solver.ims_per_gpu=0, solver.max_iter=450: expected both >= 1"),
])
def test_config_errors_name_the_value_and_the_fix(call, message):
    with pytest.raises(ConfigError) as e:
        call()
    assert message in str(e.value)
    assert isinstance(e.value, SpecError) and e.value.exit_code == 64


def test_print_config_shows_the_resolved_value(capsys):
    import yaml

    from mpirun_kit.maskrcnn.train import main

    rc = main(["--config", "demo", "--data-dir", "d", "--output-dir", "o", "--print-config",
               "--set", "solver.base_lr=0.01"], environ={})
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("# solver.base_lr: preset 'demo' says 0.02, user value 0.01 wins\n")
    assert "depth: [1, 1, 1, 1]" in out
    assert config_from_dict(yaml.safe_load(out)) == resolve_config("demo", {"solver.base_lr": "0.01"})[0]
    assert main(["--config", "demo", "--data-dir", "d", "--output-dir", "o", "--print-config",
                 "--set", "solver.nope=1"], environ={}) == 64
    assert "unknown config key 'solver.nope'" in capsys.readouterr().err
