"""benchmarks/bench_maskrcnn_gpu.py: the parts a CPU machine can check.

The benchmark itself needs a GPU (it times the trainer on CUDA); here: its argument checks, the
hard failure when the compiled CUDA ops are not what the step would run (this CPU-only build has
no CUDA kernels, so that failure is real, not mocked), and the COCO-shaped set it writes loading
through the trainer's own dataset class.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_maskrcnn_gpu as bench  # noqa: E402

from mpirun_kit.maskrcnn.data.coco import CocoDataset  # noqa: E402
from mpirun_kit.maskrcnn.data.masks import GT_MASK_SIZE  # noqa: E402


@pytest.mark.parametrize("argv,message", [
    (["--steps", "50", "--window", "20"], r"--steps \(50\) must be a multiple of --window \(20\)"),
    (["--images", "0"], r"--images must be >= 1, got 0"),
    (["--warmup", "-1"], r"--warmup must be >= 0, got -1"),
])
def test_bad_arguments(argv, message):
    with pytest.raises(bench.BenchError, match=message):
        bench.parse_args(argv)


def test_defaults_time_the_gpu_preset_at_800x1333():
    args = bench.parse_args([])
    assert (args.device, args.size, args.warmup, args.steps, args.window) == ("cuda", 800, 20, 60, 20)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this build may have CUDA kernels on a GPU host")
def test_refuses_to_time_without_compiled_cuda_kernels(capsys):
    with pytest.raises(bench.BenchError, match=r"the compiled ops have no CUDA kernels for roi_align, _roi_align_backward, "
                                               r"generate_proposals_padded.*rebuild on the GPU host with FORCE_CUDA=1"):
        bench.require_compiled_ops("cuda")
    bench.require_compiled_ops("cpu")  # the CPU kernels are there
    assert bench.main(["--device", "cuda"]) == 70
    assert "bench_maskrcnn_gpu: error: no CUDA device here" in capsys.readouterr().err


def test_refuses_to_time_the_reference_fallback(monkeypatch):
    from mpirun_kit.maskrcnn import ops

    # the loader's state says the extension did not load (as on a host where the build failed)
    monkeypatch.setattr(ops, "ops_available", lambda: False)
    monkeypatch.setattr(ops, "load_error", lambda: ImportError("no _C.so"))
    with pytest.raises(bench.BenchError, match=r"the compiled detection ops are not loaded \(no _C.so\); the step would "
                                               r"time the pure-PyTorch references"):
        bench.require_compiled_ops("cuda")


def test_the_synthetic_set_is_coco_shaped_and_loads(tmp_path):
    ann = bench.write_coco_like(tmp_path, 2, 80, 133, num_classes=80)
    ds = CocoDataset(ann, tmp_path / "train", train=True, min_sizes=(80,), max_size=133, num_classes=80)
    s = ds[(0, 0)]
    assert tuple(s["image"].shape) == (3, 80, 133) and s["boxes"].shape[0] >= 3
    assert s["masks"].shape == (s["boxes"].shape[0], GT_MASK_SIZE, GT_MASK_SIZE) and s["masks"].sum() > 0


def test_cost_prints_the_step_cost_model_without_a_gpu(capsys):
    """--cost: the cost model of the benchmark's own config (meta device), with the before column."""
    assert bench.main(["--cost", "--size", "128", "--cost-baseline", "model.roi_heads.mask_rois_per_image=0"]) == 0
    out = capsys.readouterr().out
    assert "step cost per image: 4 images of 128x224, forward + backward + SGD, 128 mask slots per batch" in out
    table, result = out.split("\n{", 1)
    assert "roofline on H100 SXM, bf16 dense 989 TFLOP/s, HBM3 3.35 TB/s (assumed peaks)" in table
    assert "(bar: 130 img/s per GPU, " in table
    result = __import__("json").loads("{" + result)
    assert (result["mask_slots"], result["before"]["mask_slots"]) == (128, 512)
    # the mask head runs on a quarter of the slots: a quarter of its FLOPs, nothing else changes
    assert result["gflop_per_image"]["mask_head"] * 4 == pytest.approx(result["before"]["gflop_per_image"]["mask_head"],
                                                                       rel=1e-3)
    assert result["gflop_per_image"]["backbone"] == result["before"]["gflop_per_image"]["backbone"]


def test_cost_reports_a_bad_override(capsys):
    assert bench.main(["--cost", "--size", "64", "--cost-baseline", "model.roi_heads.mask_rois_per_imag=0"]) == 70
    err = capsys.readouterr().err
    assert "bench_maskrcnn_gpu: error: --set/--cost-baseline:" in err and "mask_rois_per_imag" in err
    assert bench.main(["--cost", "--size", "64", "--cost-baseline", "mask_rois_per_image"]) == 70
    assert ("--set/--cost-baseline 'mask_rois_per_image': expected KEY=VALUE, e.g. "
            "model.roi_heads.mask_rois_per_image=0") in capsys.readouterr().err


def test_the_coco_like_set_is_issue_36s_and_the_default_stays_the_noise_set(tmp_path):
    assert bench.parse_args([]).data == "noise" and bench.parse_args(["--data", "coco-like"]).data == "coco-like"
    ann = bench.write_coco_like(tmp_path, 2, 80, 133, data="coco-like")
    ds = CocoDataset(ann, tmp_path / "train", train=True, min_sizes=(800,), max_size=1333, num_classes=80)
    s = ds[(0, 0)]
    assert tuple(s["image"].shape) == (3, 480, 640) and s["size"] == (800, 1067) and s["boxes"].shape[0] == 7
