"""Target ``sim``: the simulated multi-host cluster on this machine (mpirun_kit.sim).

Place in the data flow: CompiledJob -> ``dryrun`` (host count, the
hyperparameters carrying the LaunchSpec, the entrypoint argv: a value) ->
``run`` brings up N namespaced hosts named algo-1..N, writes each host's
SageMaker-style config, starts the per-host entrypoint on every host at once
(as SageMaker does), streams their output, and tears the cluster down however
it ends.  The job's exit code is the master's (every host reports the same).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from ..clock import SYSTEM_CLOCK, Clock, Deadline
from ..model import LAUNCH_SPEC_HYPERPARAMETER
from ..spec.compile import CompiledJob
from .base import DryRun, Progress, exit_code_of, retrying

#: seconds allowed on top of the job's own limit for bring-up, ssh readiness and tear-down.
OVERHEAD_S = 180.0
DEFAULT_JOB_S = 3600.0


def dryrun(compiled: CompiledJob, *, root: Path, name: str, mpirun_kit_exe: str) -> DryRun:
    """The simulated run as a value.

    Args:
        compiled: the job (target sim).
        root: directory for the cluster's state and per-host logs.
        name: cluster name (1-12 lowercase letters/digits), chosen by the caller.
        mpirun_kit_exe: the console script every host runs.
    """
    t = compiled.launch.timeouts
    deadline = (t.job_s or DEFAULT_JOB_S) + t.ssh_ready_s + OVERHEAD_S
    request = {
        "name": name, "root": str(root), "hosts": len(compiled.hosts),
        "instance_type": compiled.job.resources.instance_type or "ml.c5.xlarge",
        "entrypoint": [mpirun_kit_exe, "entrypoint", "--no-sshd"],
        "hyperparameters": {LAUNCH_SPEC_HYPERPARAMETER: compiled.launch.to_json()},
        "deadline_s": deadline, "retries": compiled.job.retries,
    }
    return DryRun("sim", compiled.job.name, request,
                  notes=(f"per-host logs: {root}/<host>/entrypoint.log",))


class _Tail:
    """Follows one host's log file, copying each complete new line, bytes unchanged, behind a prefix."""

    def __init__(self, path: Path, prefix: str):
        self.path, self.prefix, self.pos, self.buf = path, prefix.encode(), 0, b""

    def pump(self, out: BinaryIO, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except OSError:
            return
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        if final and self.buf:
            lines, self.buf = lines + [self.buf], b""
        for line in lines:
            out.write(self.prefix + line + b"\n")
        out.flush()


def run_once(dry: DryRun, attempt: int, *, clock: Clock = SYSTEM_CLOCK, out: BinaryIO | None = None,
             progress: Progress | None = None) -> int:
    from ..sim import SimCluster

    out = out or sys.stdout.buffer
    req = dry.request
    progress = progress or Progress(clock=clock)
    root = Path(req["root"]) / f"attempt-{attempt}"
    progress.update(f"sim: bringing up {req['hosts']} host(s)")
    with SimCluster(req["hosts"], root, req["name"], instance_type=req["instance_type"], clock=clock) as sim:
        sim.write_sagemaker_config(hyperparameters=req["hyperparameters"])
        procs = sim.start_entrypoints(req["entrypoint"])
        master = sim.hosts[0].name
        tails = [_Tail(sim.host(h).dir / "entrypoint.log", "" if h == master else f"[{h} entrypoint] ")
                 for h in procs]
        deadline = Deadline(clock, req["deadline_s"])
        while True:
            for t in tails:
                t.pump(out)
            running = [h for h, p in procs.items() if p.poll() is None]
            if not running:
                break
            if deadline.expired():
                progress.done(f"sim: job ran past {req['deadline_s']:g}s; tearing the cluster down")
                return 124
            progress.update(f"sim: {len(procs) - len(running)}/{len(procs)} host(s) finished; "
                            f"running: {', '.join(running)}")
            clock.sleep(0.2)
        for t in tails:
            t.pump(out, final=True)
        codes = {h: exit_code_of(p.returncode) for h, p in procs.items()}
    code = codes[master]
    summary = ", ".join(f"{h}={c}" for h, c in codes.items())
    progress.done(f"sim: every host finished ({summary})" if len(set(codes.values())) == 1 else
                  f"sim: hosts disagree ({summary}); the master's code {code} is the job's")
    return code


def run(dry: DryRun, *, clock: Clock = SYSTEM_CLOCK, out: BinaryIO | None = None) -> int:
    """Run on a fresh simulated cluster (one per attempt); return the job's exit code."""
    progress = Progress(clock=clock)
    return retrying(lambda a: run_once(dry, a, clock=clock, out=out, progress=progress),
                    dry.request["retries"], progress)
