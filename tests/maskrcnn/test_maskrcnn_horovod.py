"""The optional Horovod backend, under a real mpirun with 2 ranks.

Horovod is an optional extra: ``bash ops/quickstart.sh test`` builds it (ops/build-horovod.sh),
so under CI a missing Horovod fails these tests rather than skipping them; elsewhere they skip.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_maskrcnn_ddp import _batch, _grads, _model
from test_maskrcnn_train import TINY, _final_state

HERE = Path(__file__).resolve().parent

try:
    import horovod.torch  # noqa: F401
    HOROVOD = None
except ImportError as exc:  # the optional extra is not installed
    HOROVOD = exc

pytestmark = pytest.mark.mpi


@pytest.fixture
def mpirun():
    if HOROVOD is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"horovod.torch does not import ({HOROVOD}); CI's set-up (ops/quickstart.sh test) builds it")
        pytest.skip(f"optional Horovod backend not installed ({HOROVOD}); bash ops/build-horovod.sh .venv/bin/python")
    path = shutil.which("mpirun")
    if path is None:
        pytest.fail("mpirun not found: install openmpi-bin (bash ops/quickstart.sh setup)")
    return [path, "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", "2"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE") and not k.startswith("OMPI_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"{cmd} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc


def test_horovod_step_equals_single_process_step(mpirun, shapes, tmp_path):
    out = tmp_path / "hvd_grads.pt"
    _run([*mpirun, sys.executable, "-W", "ignore", str(HERE / "horovod_step.py"), str(shapes), str(out)])
    saved = torch.load(out)
    model = _model()
    sum(model(_batch(shapes)).values()).backward()
    single = _grads(model)
    assert saved["size"] == 2 and saved["grads"].keys() == single.keys() and len(single) > 20
    for name in single:
        torch.testing.assert_close(saved["grads"][name], single[name], rtol=1e-4, atol=1e-6,
                                   msg=lambda m: f"{name}: {m}")


def test_trainer_trains_evaluates_and_checkpoints_under_horovod(mpirun, shapes, tmp_path):
    out = tmp_path / "run"
    proc = _run([*mpirun, sys.executable, "-W", "ignore", "-m", "mpirun_kit.maskrcnn.train", "--config", "demo",
                 "--data-dir", str(shapes), "--output-dir", str(out), *TINY, "--set", "backend=horovod",
                 "--set", "solver.max_iter=3", "--set", "log_period=1"])
    log = proc.stdout + proc.stderr
    assert re.search(r"rank 0/2 \(local 0\) on cpu, \d+ thread\(s\), \d+ loader worker\(s\) \([^)]*\), backend horovod",
                     log), log[-3000:]
    state = _final_state(out)
    assert state["step"] == 3 and len(state["rng"]) == 2 and state["config"]["backend"] == "horovod"
    assert state["optimizer"]["state"], "the Horovod-wrapped optimizer saved no momentum"
    final = json.loads((out / "metrics.json").read_text())
    assert final["step"] == 3 and 0.0 <= final["bbox_mAP"] <= 1.0 and 0.0 <= final["segm_mAP"] <= 1.0
