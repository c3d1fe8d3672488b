"""Shared helpers for entrypoint tests (imported by path-relative name; no fixtures here): local runs through
the CLI, and jobs on the simulated cluster (every host's entrypoint at once, as on SageMaker)."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec, Timeouts

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "tests" / "bin"
PY = sys.executable
CLI = [PY, "-m", "mpirun_kit.cli.main"]
ENTRY = [str(Path(PY).parent / "mpirun_kit"), "entrypoint", "--no-sshd"]
FAST = Timeouts(ssh_ready_s=6.0, ssh_ready_per_host_s=0.5, master_connect_s=60.0, master_silence_s=5.0,
                daemon_wait_s=60.0, grace_s=5.0)


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


def sim_cluster(n, root, name, **kw):
    from mpirun_kit.sim import SimCluster

    return SimCluster(n, root, name, **kw)


def run_job(sim, program, hosts=None, timeout=120.0, **spec_kw):
    spec = LaunchSpec(program=tuple(program), processes_per_host=2, timeouts=spec_kw.pop("timeouts", FAST), **spec_kw)
    sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
    for h in sim.hosts:
        (h.opt_ml / "output" / "failure").unlink(missing_ok=True)
    return sim.start_entrypoints(ENTRY, hosts=hosts)


def wait_all(procs, timeout=120.0):
    return {h: p.wait(timeout=timeout) for h, p in procs.items()}


def failure_of(sim, host):
    path = sim.host(host).opt_ml / "output" / "failure"
    return path.read_text() if path.exists() else ""
