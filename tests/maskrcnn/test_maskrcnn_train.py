"""The training entry as real processes: exact resume, SIGTERM checkpointing under mpirun, metrics.

Runs ``python -m mpirun_kit.maskrcnn.train`` on the session's tiny synthetic set with the demo
model at 96 px, a few steps each.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

TINY = ["--set", "input.min_size_train=96", "--set", "input.max_size_train=128", "--set", "input.min_size_test=96",
        "--set", "input.max_size_test=128", "--set", "solver.ims_per_gpu=2", "--set", "test.ims_per_gpu=4",
        "--set", "solver.warmup_iters=2"]
#: the metric regexes a SageMaker job definition would use
SAGEMAKER_REGEX = {"loss": r"step=\d+ loss=([0-9.e+-]+)", "bbox_mAP": r"bbox_mAP=([0-9.]+)",
                   "segm_mAP": r"segm_mAP=([0-9.]+)"}


def _train(data: Path, out: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-W", "ignore", "-m", "mpirun_kit.maskrcnn.train", "--config", "demo", "--data-dir", str(data),
           "--output-dir", str(out), *TINY, *extra]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE") and not k.startswith("OMPI_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if check and proc.returncode != 0:
        pytest.fail(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def _final_state(out: Path) -> dict:
    return torch.load(out / (out / "last_checkpoint").read_text().strip(), weights_only=False)


def test_k_steps_resume_j_steps_equals_k_plus_j_straight(shapes, tmp_path):
    steps = ["--set", "solver.max_iter=4", "--set", "data.num_workers=1", "--set", "log_period=1"]
    straight = _train(shapes, tmp_path / "a", *steps)
    first = _train(shapes, tmp_path / "b", *steps, "--stop-after-steps", "2")
    assert "paused at step 2" in first.stderr and not (tmp_path / "b/metrics.json").exists()
    assert "1 loader worker(s) (data.num_workers=1)" in straight.stderr  # the chosen number is logged
    second = _train(shapes, tmp_path / "b", *steps)
    assert "resumed from" in second.stderr and "at step 2 (epoch" in second.stderr
    a, b = _final_state(tmp_path / "a"), _final_state(tmp_path / "b")
    assert a["step"] == b["step"] == 4 and a["sampler"] == b["sampler"]
    for k in a["model"]:
        torch.testing.assert_close(b["model"][k], a["model"][k], rtol=1e-5, atol=1e-6, msg=lambda m: f"{k}: {m}")
    for k, st in a["optimizer"]["state"].items():
        torch.testing.assert_close(b["optimizer"]["state"][k]["momentum_buffer"], st["momentum_buffer"],
                                   rtol=1e-5, atol=1e-6)
    # same losses logged for steps 3 and 4 either way
    loss = lambda text: re.findall(r"^step=([34]) loss=(\S+)", text, re.M)
    assert loss(second.stdout) == loss(straight.stdout) and len(loss(straight.stdout)) == 2
    # metrics: SageMaker-parseable lines, JSON lines, final metrics.json, resolved config saved
    for name, rx in SAGEMAKER_REGEX.items():
        assert re.search(rx, straight.stdout), name
    records = [json.loads(l) for l in (tmp_path / "a/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4] and "bbox_mAP" in records[-1]
    # issue #32: denormals flushed (the default) and the foreground RoIs per image logged; the GT
    # boxes join the proposals, so every image has foreground, and the capped head trains on at
    # most that many
    for r in (r for r in records if "loss" in r):
        assert r["denormal_flush_ranks"] == 1, r
        assert r["fg_rois_per_image"] >= r["mask_rois_per_image"] > 0, r
    final = json.loads((tmp_path / "a/metrics.json").read_text())
    assert final["step"] == 4 and final["skipped_images"] == 0 and 0.0 <= final["segm_mAP"] <= 1.0
    assert a["config"]["solver"]["max_iter"] == 4 and a["config"]["model"]["num_classes"] == 3


@pytest.mark.mpi
def test_sigterm_mid_epoch_checkpoints_on_every_rank_and_resumes(shapes, tmp_path):
    out = tmp_path / "run"
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.fail("mpirun not found: install openmpi-bin (bash ops/quickstart.sh setup)")
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", "2",
           sys.executable, "-W", "ignore", "-m", "mpirun_kit.maskrcnn.train", "--config", "demo",
           "--data-dir", str(shapes), "--output-dir", str(out), *TINY, "--set", "solver.max_iter=40",
           "--set", "log_period=1", "--set", "solver.checkpoint_period=1000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step=1 "):
                # issue #32: the flush mode is on in both ranks (each rank probes its own threads;
                # the count rides on the log step's all-reduce)
                assert " denormal_flush_ranks=2" in line, line
                break
            assert time.monotonic() < deadline, "".join(lines)
        ranks = [p for p in psutil.Process(proc.pid).children(recursive=True)
                 if "mpirun_kit.maskrcnn.train" in " ".join(p.cmdline())]
        assert len(ranks) == 2
        # a spot notice reaching one rank: the other learns of it through the per-step all-reduce
        ranks[-1].send_signal(signal.SIGTERM)
        lines += proc.stdout.readlines()
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(lines)
    assert rc == 143, text[-3000:]
    assert "SIGTERM: stopped after step" in text
    state = _final_state(out)
    stopped = state["step"]
    assert 1 <= stopped < 40 and len(state["rng"]) == 2 and state["sampler"]["position"] == stopped
    resumed = _train(shapes, out, "--set", "solver.max_iter=40", "--set", "log_period=1", "--stop-after-steps", "2")
    assert f"resumed from {out / f'model_{stopped:07d}.pth'} at step {stopped}" in resumed.stderr
    assert _final_state(out)["step"] == stopped + 2


def test_the_loop_talks_to_the_other_ranks_once_per_log_step_not_every_step(shapes, tmp_path):
    """Issue 20: the stop flag rides on the log step's all-reduce (before: an all-reduce and .item() per step)."""
    from mpirun_kit.maskrcnn.dist import Comm, DistInfo
    from mpirun_kit.maskrcnn.train import Trainer, build_parser

    args = build_parser().parse_args(["--config", "demo", "--data-dir", str(shapes), "--output-dir", str(tmp_path),
                                      *TINY, "--set", "solver.max_iter=6", "--set", "log_period=3",
                                      "--stop-after-steps", "6"])
    t = Trainer(args, DistInfo(0, 1, 0, 1))
    calls = []
    real = Comm.allreduce_sum

    def counted(self, x):
        calls.append(tuple(x.shape))
        return real(self, x)

    Comm.allreduce_sum = counted
    try:
        assert t.run() == 0
    finally:
        Comm.allreduce_sum = real
    # steps 3 and 6: [stop flag, ranks flushing denormals, total, 5 losses, foreground RoIs per image,
    # mask-head RoIs per image]; then the end-of-run count of skipped images
    assert calls == [(10,), (10,), (1,)]
    records = [json.loads(ln) for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [3, 6]


def test_flush_denormal_false_keeps_them(shapes, tmp_path):
    """The option to keep denormals (torch's default): the rank's probe then finds them kept."""
    proc = _train(shapes, tmp_path, "--set", "flush_denormal=false", "--set", "log_period=1", "--stop-after-steps", "1")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("step=1 "))
    assert " denormal_flush_ranks=0" in line, line
    assert "denormals kept" in proc.stderr


def test_flush_reaches_the_threads_of_an_existing_pool():
    """torch.set_flush_denormal sets the calling thread only: with the 2-thread pool already running,
    the probe still finds a thread keeping denormals (the test fails without the library's setter);
    ops.set_flush_denormal sets every thread."""
    code = ("import torch; from mpirun_kit.maskrcnn.train import denormals_flushed as f; "
            "from mpirun_kit.maskrcnn.ops import set_flush_denormal; torch.set_num_threads(2); "
            "a = f(); torch.set_flush_denormal(True); b = f(); set_flush_denormal(True); c = f(); "
            "set_flush_denormal(False); print(a, b, c, f())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False", "False", "True", "False"], out.stdout + out.stderr
