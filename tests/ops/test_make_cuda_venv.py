"""ops/make-cuda-venv.sh: strict, idempotent by its stamp, and refuses a torch without CUDA.

The venv's interpreter is a stand-in script here (the real run downloads 2.7 GB, which the test
suite does by running the script once through ops/quickstart.sh): it records the pip calls and
answers the CUDA check from TORCH_CUDA.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "ops/make-cuda-venv.sh"

STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../calls"
if [ "$1" = -c ]; then [ -n "$TORCH_CUDA" ]; exit $?; fi
exit 0
"""


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin/python"
    py.write_text(STAND_IN)
    py.chmod(0o755)
    return venv


def _run(venv: Path, cuda: str):
    return subprocess.run(["bash", str(SCRIPT), str(venv)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, TORCH_CUDA=cuda, TORCH_SPEC="torch==2.13.0"))


def test_script_is_strict_and_executable():
    assert "set -euo pipefail" in SCRIPT.read_text() and os.access(SCRIPT, os.X_OK)


def test_installs_cuda_torch_without_the_cpu_wheel_config_then_does_nothing(tmp_path):
    venv = _venv(tmp_path)
    first = _run(venv, "13.0")
    assert first.returncode == 0, first.stderr
    calls = (venv / "calls").read_text()
    assert "-m pip install -q torch==2.13.0" in calls and "pycocotools>=2.0.7" in calls
    assert (venv / ".make-cuda-venv-stamp").read_text().startswith("torch==2.13.0 ")
    (venv / "calls").unlink()
    again = _run(venv, "13.0")
    assert again.returncode == 0 and "pip install" not in (venv / "calls").read_text()


def test_a_torch_without_cuda_fails_naming_the_venv(tmp_path):
    venv = _venv(tmp_path)
    r = _run(venv, "")
    assert r.returncode == 1
    assert (f"make-cuda-venv: {venv} has a torch without CUDA (torch==2.13.0 resolved to a CPU wheel); "
            "check PIP_EXTRA_ARGS") in r.stderr
    assert not (venv / ".make-cuda-venv-stamp").exists()
