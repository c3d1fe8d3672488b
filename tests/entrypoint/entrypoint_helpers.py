"""Shared helpers for entrypoint tests (imported by path-relative name; no fixtures here)."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from mpirun_kit.spec.launch_spec import LaunchSpec

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "tests" / "bin"
PY = sys.executable
CLI = [PY, "-m", "mpirun_kit.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_spec(path: Path, spec: LaunchSpec) -> Path:
    path.write_text(spec.to_json())
    return path


def write_config(opt_ml: Path, resourceconfig=None, hyperparameters=None, raw_rc: str | None = None) -> Path:
    cfg = opt_ml / "input" / "config"
    cfg.mkdir(parents=True, exist_ok=True)
    if raw_rc is not None:
        (cfg / "resourceconfig.json").write_text(raw_rc)
    elif resourceconfig is not None:
        (cfg / "resourceconfig.json").write_text(json.dumps(resourceconfig))
    if hyperparameters is not None:
        (cfg / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    return cfg


def cli(args, timeout=120, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("SM_HOSTS", None)
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=timeout, env=env, **kw)
