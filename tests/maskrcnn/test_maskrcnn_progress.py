"""The trainer reports its step counter through mpirun_kit.progress (hang detection sees it, observe/hang.py).

A real training process, 3 steps on the tiny synthetic set, with the progress pipe a rank wrapper
would hand it (observe/relay.py); the test reads that pipe.
"""
import os
import subprocess
import sys

TINY = ["--set", "input.min_size_train=96", "--set", "input.max_size_train=128", "--set", "input.min_size_test=96",
        "--set", "input.max_size_test=128", "--set", "solver.ims_per_gpu=2", "--set", "test.ims_per_gpu=4",
        "--set", "solver.warmup_iters=2", "--set", "solver.max_iter=3", "--set", "data.num_workers=1",
        "--set", "test.eval_period=0"]


def test_trainer_reports_each_step(shapes, tmp_path):
    r, w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE") and not k.startswith("OMPI_")}
    env["MPIRUN_KIT_PROGRESS_FD"] = str(w)
    cmd = [sys.executable, "-W", "ignore", "-m", "mpirun_kit.maskrcnn.train", "--config", "demo", "--data-dir",
           str(shapes), "--output-dir", str(tmp_path / "out"), *TINY]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, pass_fds=(w,), timeout=600)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        reported = f.read().split()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert reported == [b"1", b"2", b"3"]
