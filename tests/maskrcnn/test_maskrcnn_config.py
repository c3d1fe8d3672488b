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


# ------------------------------------------------------------ schedule and device support (issue #11)
from mpirun_kit.maskrcnn.config import check_device_support, resolve_schedule, step_host_syncs  # noqa: E402


def test_linear_scaling_schedule_for_32_gpus_x_4_images():
    cfg, _ = resolve_config("r50_fpn_1x")
    s = resolve_schedule(cfg, 32 * cfg.solver.ims_per_gpu)
    assert cfg.solver.ims_per_gpu == 4 and s.global_batch == 128
    assert s.max_iter == 90000 * 16 // 128 == 11250
    assert s.steps == (7500, 10000) and s.warmup_iters == 125 and s.checkpoint_period == 625
    assert s.base_lr == pytest.approx(0.02 * 128 / 16)
    assert "max_iter=11250" in s.format() and "x0.125 (reference batch 16 / global batch 128)" in s.format()


def test_schedule_unscaled_when_the_preset_does_not_ask():
    cfg, _ = resolve_config("demo", {"solver.ims_per_gpu": "2"})
    s = resolve_schedule(cfg, 2)
    assert (s.scale, s.max_iter, s.warmup_iters) == (1.0, cfg.solver.max_iter, cfg.solver.warmup_iters)


def test_gpu_preset_defaults():
    s = resolve_config("r50_fpn_1x")[0].solver
    assert (s.amp, s.channels_last, s.cudnn_benchmark, s.ddp_static_graph, s.cuda_graphs) == ("bf16", True, True, False, False)


@pytest.mark.parametrize("override,device,kw,message", [
    ({}, "cpu", {}, r"solver.amp='bf16' needs a CUDA device, but this run is on cpu; use --set solver.amp=none"),
    ({"solver.amp": "none"}, "cpu", {}, r"solver.channels_last=True needs a CUDA device.*--set solver.channels_last=false"),
    ({}, "cuda", {"bf16_supported": False, "capability": (7, 0)},
     r"solver.amp='bf16' but this GPU \(sm70\) has no bfloat16 support; use --set solver.amp=fp16"),
    ({"solver.amp": "fp16"}, "cuda", {"capability": (6, 1)},
     r"solver.channels_last=true needs tensor cores \(sm70 or newer\), this GPU is sm61"),
    ({"solver.cuda_graphs": "true", "solver.amp": "fp16"}, "cuda",
     {"bf16_supported": True, "capability": (9, 0), "step_syncs": step_host_syncs(resolve_config("r50_fpn_1x", {"solver.amp": "fp16"})[0])},
     r"solver.cuda_graphs=true needs a training step without host syncs, but this step still waits for the GPU in: "
     r"GradScaler.step \(solver.amp=fp16 reads the found-inf flag on the host\); use --set solver.cuda_graphs=false"),
    ({"solver.cuda_graphs": "true"}, "cpu", {},
     r"solver.amp='bf16' needs a CUDA device"),
])
def test_settings_the_device_cannot_honour_fail_naming_the_key(override, device, kw, message):
    cfg, _ = resolve_config("r50_fpn_1x", override)
    with pytest.raises(ConfigError, match=message):
        check_device_support(cfg, device, **kw)


def test_supported_settings_pass():
    cfg, _ = resolve_config("r50_fpn_1x")
    assert step_host_syncs(cfg) == []
    check_device_support(cfg, "cuda", bf16_supported=True, capability=(9, 0), step_syncs=["x"])
    check_device_support(resolve_config("demo")[0], "cpu")
    # CUDA graphs (torch.compile mode="reduce-overhead") on a step without host syncs: accepted
    check_device_support(resolve_config("r50_fpn_1x", {"solver.cuda_graphs": "true"})[0], "cuda",
                         bf16_supported=True, capability=(9, 0))


@pytest.mark.parametrize("multiple", ["-32", "48"])
def test_canvas_multiple_must_be_a_multiple_of_the_size_divisibility(multiple):
    with pytest.raises(ConfigError, match=rf"input.canvas_multiple={multiple}, input.size_divisibility=32: expected "
                                          r"size_divisibility >= 1 and canvas_multiple 0 \(= size_divisibility\) or a "
                                          r"multiple of it, e.g. 128"):
        resolve_config("demo", {"input.canvas_multiple": multiple})
    assert resolve_config("r50_fpn_1x")[0].input.canvas_multiple == 128


def test_plan_prints_the_scaled_schedule_for_maskrcnn_jobs(capsys, monkeypatch):
    from mpirun_kit.cli.main import main
    from mpirun_kit.maskrcnn.config import schedule_for_program

    repo = __import__("pathlib").Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    outputs = ["mrk-role.RoleArn=arn:aws:iam::123456789012:role/mrk", "mrk-fsx.FileSystemId=fs-0123456789abcdef0",
               "mrk-fsx.LustreMountName=abcdefgh", "mrk-vpc.PrivateSubnet1Id=subnet-1", "mrk-vpc.SecurityGroupId=sg-1",
               # the per-job role (issue #26) adds these outputs to what plan resolves
               "mrk-role.RoleS3Uri=s3://bucket/prefix", "mrk-role.SubmitRoleArn=arn:aws:iam::123456789012:role/mrk-submit",
               "mrk-role.RoleImageRepository=123456789012.dkr.ecr.us-west-2.amazonaws.com/mrk"]
    for job in ("jobs/maskrcnn.yaml", "jobs/maskrcnn-p4d.yaml"):
        assert main(["plan", job, *[a for o in outputs for a in ("--stack-output", o)]]) == 0
        out = capsys.readouterr().out
        assert ("maskrcnn schedule x0.125 (reference batch 16 / global batch 128): max_iter=11250 "
                "lr_steps=[7500, 10000] warmup_iters=125 checkpoint_period=625 eval_period=end lr=0.16") in out, out[-600:]
    # a --set in the job's argv is honoured; a bad one is reported, not raised
    prog = ["python", "-m", "mpirun_kit.maskrcnn.train", "--config", "r50_fpn_1x", "--set", "solver.ims_per_gpu=8"]
    assert "max_iter=5625 " in schedule_for_program(prog, 32)
    assert "error: config key 'solver.ims_per_gpu'" in schedule_for_program(prog[:-1] + ["solver.ims_per_gpu=x"], 32)
    assert schedule_for_program(["python", "train.py"], 8) is None
    # one parser (issue #31 item 9): the trainer's own flag definitions, --set=K=V and bad values included
    assert "max_iter=5625 " in schedule_for_program(prog[:-2] + ["--set=solver.ims_per_gpu=8"], 32)
    assert schedule_for_program(prog[:3] + ["--set", "solver.ims_per_gpu=8"], 8) is None  # no --config: not resolvable
    assert "error: argument --config: invalid choice: 'nope'" in schedule_for_program(prog[:3] + ["--config", "nope"], 8)
    assert "error: --set 'x': expected KEY=VALUE" in schedule_for_program(prog + ["--set", "x"], 8)


@pytest.mark.parametrize("cpus,ranks,device,workers,threads,expected", [
    (192, 8, "cuda", -1, 0, (2, 22)),   # a p5: 24 vCPUs per GPU, 2 for the rank, 22 for its loader
    (16, 1, "cuda", -1, 0, (2, 14)),    # the one-H100 machine of issue #36's figures
    (2, 2, "cuda", -1, 0, (1, 0)),      # fewer CPUs than ranks x threads: no workers, at least 1 thread
    (16, 2, "cpu", -1, 0, (8, 0)),      # the CPU step computes on the share: no workers by default
    (16, 2, "cpu", -1, 2, (2, 6)),
    (192, 8, "cuda", 4, 0, (2, 4)),     # a number set is kept
    (192, 8, "cuda", -1, 6, (6, 18)),
])
def test_loader_share_follows_the_host(cpus, ranks, device, workers, threads, expected):
    from mpirun_kit.maskrcnn.config import loader_share

    assert loader_share(cpus, ranks, device, workers, threads) == expected


def test_the_plan_line_names_the_loader_workers():
    from mpirun_kit.maskrcnn.config import schedule_for_program

    prog = ["python", "-m", "mpirun_kit.maskrcnn.train", "--config", "r50_fpn_1x"]
    assert "loader workers per rank: auto (data.num_workers=-1: the host's CPUs / its ranks, less the rank's " \
           "threads (2 on GPU, all on CPU); the trainer logs the number)" in schedule_for_program(prog, 8)
    assert schedule_for_program(prog + ["--set", "data.num_workers=6"], 8).endswith(
        "; loader workers per rank: 6 (data.num_workers)")


@pytest.mark.parametrize("key,value,message", [
    ("data.num_workers", "-2", r"data.num_workers=-2: expected -1 \(follow the host\) or >= 0 worker processes"),
    ("threads_per_rank", "-1", r"threads_per_rank=-1: expected 0 \(follow the host\) or >= 1 threads"),
])
def test_bad_worker_and_thread_counts_name_the_key(key, value, message):
    from mpirun_kit.maskrcnn.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        resolve_config("r50_fpn_1x", {key: value})
