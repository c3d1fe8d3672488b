"""The trainer's TensorBoard scalars and its terminal progress bar (issue 14 item 4).

The scalars are read back from the event files with TensorBoard's own reader; the progress bar is
tqdm on a terminal and nothing at all otherwise.
"""
import io
import sys

import pytest

from mpirun_kit.maskrcnn.train import _Progress, _Scalars, build_parser


def read_scalars(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, round(e.value, 4)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_for_step_and_eval_records(tmp_path):
    s = _Scalars(tmp_path / "tb")
    s.add({"step": 20, "loss": 0.84, "lr": 0.02, "loss_mask": 0.3, "images_per_s": 31.5, "eta_s": 100})
    s.add({"step": 40, "loss": 0.5, "lr": 0.02, "loss_mask": 0.2, "images_per_s": 33.0, "eta_s": 50})
    s.add({"step": 40, "bbox_mAP": 0.512, "segm_mAP": 0.47, "eval_s": 3.2})
    s.close()
    got = read_scalars(tmp_path / "tb")
    assert got["train/loss"] == [(20, 0.84), (40, 0.5)]
    assert got["train/lr"] == [(20, 0.02), (40, 0.02)]
    assert got["train/images_per_s"] == [(20, 31.5), (40, 33.0)]
    assert got["eval/bbox_mAP"] == [(40, 0.512)] and got["eval/segm_mAP"] == [(40, 0.47)]
    assert "train/step" not in got and "eval/step" not in got


def test_tensorboard_dir_defaults_beside_metrics(tmp_path):
    args = build_parser().parse_args(["--config", "demo", "--data-dir", "d", "--output-dir", str(tmp_path)])
    assert args.tensorboard_dir is None     # the Trainer then uses <output-dir>/tensorboard
    args = build_parser().parse_args(["--config", "demo", "--data-dir", "d", "--output-dir", str(tmp_path),
                                      "--tensorboard-dir", "/opt/ml/output/tensorboard"])
    assert str(args.tensorboard_dir) == "/opt/ml/output/tensorboard"


def test_progress_bar_only_on_a_terminal(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    off = _Progress(False)
    for i in range(1, 4):
        off.update(i, 3, "loss=0.5")
    assert err.getvalue() == ""
    on = _Progress(True)
    for i in range(1, 4):
        on.update(i, 3, "loss=0.5")
    text = err.getvalue()
    assert "3/3" in text and "loss=0.5" in text and on.bar is None     # tqdm's bar, closed at the end


def test_a_training_run_writes_event_files_beside_metrics(shapes, tmp_path):
    """A real 3-step run of the trainer: the event files hold the same loss as metrics.jsonl."""
    import json
    import os
    import subprocess

    from test_maskrcnn_progress import TINY

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE") and not k.startswith("OMPI_")}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-W", "ignore", "-m", "mpirun_kit.maskrcnn.train", "--config", "demo",
                           "--data-dir", str(shapes), "--output-dir", str(out), *TINY],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r][-1]
    got = read_scalars(out / "tensorboard")
    assert got["train/loss"][-1] == (3, round(last["loss"], 4))
    assert {"train/lr", "train/images_per_s"} <= set(got)
