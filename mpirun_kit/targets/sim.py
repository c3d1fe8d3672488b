"""Target ``sim``: the simulated multi-host cluster on this machine (mpirun_kit.sim).

Place in the data flow: CompiledJob -> ``dryrun`` (host count, the
hyperparameters carrying the LaunchSpec, the entrypoint argv: a value) ->
``run`` brings up N namespaced hosts named algo-1..N, writes each host's
SageMaker-style config, starts the per-host entrypoint on every host at once
(as SageMaker does), streams their output, and tears the cluster down however
it ends.  The job's exit code is the master's (every host reports the same).
Stopping (Ctrl-C, SIGTERM, the deadline) works as on the other targets: SIGTERM
reaches every rank (through the master's entrypoint and mpirun), their handlers
run, then after the grace period SIGKILL, and the teardown kills what is left.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..exec.output import FileTail
from ..exec.process import exit_code_of
from ..exec.result import RESULT_FILE, read_result_file
from ..exec.signals import SignalLatch
from ..exec.supervisor import Stop, Supervisor, signal_group
from ..spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER
from ..sim.layout import HOST_OPT_ML
from ..spec.compile import CompiledJob
from ..errors import ClusterError, ExitCode
from ..core import verbosity
from .base import STOPPED, DryRun, Started, StatusLine, SubmitOptions, Target, retrying
from .outcome import Outcome, launch_timeline, outcome_of

#: seconds allowed on top of the job's own limit for bring-up, ssh readiness and tear-down.
OVERHEAD_S = 180.0
DEFAULT_JOB_S = 3600.0
#: after SIGTERM, the master waits grace_s before SIGKILLing mpirun; this much more for it to report and exit.
STOP_MARGIN_S = 15.0
#: during a stop, once the master's entrypoint ended: how long the workers get to end on their own (its result
#: reaching them), then how long after their own SIGTERM before SIGKILL.
WORKER_SETTLE_S = 2.0
WORKER_STOP_S = 3.0
TEMP_ROOT_PREFIX = "mrk-sim-"


@dataclass(frozen=True)
class SimRequest:
    """What ``run`` does for a sim job (the target's typed request, base.Target's ``R``)."""

    name: str                    # the cluster's name (the job's: ``cluster_name``)
    root: str | None             # its state and per-host logs; None: a temporary directory made at start
    hosts: int
    instance_type: str
    entrypoint: list[str]        # what every host runs (--opt-ml: the host's /opt/ml under its path here)
    hyperparameters: dict        # hyperparameters.json, carrying the LaunchSpec
    deadline_s: float
    grace_s: float
    retries: int


def dryrun(compiled: CompiledJob, *, root: Path | None, name: str, mpirun_kit_exe: str, verbose: bool = True,
           quiet: bool = False) -> DryRun[SimRequest]:
    """The simulated run as a value.

    Args:
        compiled: the job (target sim).
        root: directory for the cluster's state and per-host logs; None: a new temporary directory,
            made when the job starts (so a dry run writes nothing) and removed if the job succeeds.
        name: cluster name (1-12 lowercase letters/digits), chosen by the caller.
        mpirun_kit_exe: the console script every host runs.
        verbose: the hosts' entrypoints print their progress lines (`submit -v`); else only warnings, errors.
        quiet: the hosts' entrypoints print only errors and the result (`submit -q`).

    Each host's entrypoint finds a job secret made for the run in its ``mpirun-keys`` input channel,
    as `keys install --sagemaker` delivers one on SageMaker, so workers authenticate on the result channel.
    """
    t = compiled.launch.timeouts
    deadline = (t.job_s or DEFAULT_JOB_S) + t.ssh_ready_s + OVERHEAD_S
    request = SimRequest(
        name=name, root=str(root) if root else None, hosts=len(compiled.hosts),
        instance_type=compiled.job.resources.instance_type or "ml.c5.xlarge",
        # --opt-ml: the host's /opt/ml under its path on this machine, so printed paths (the failure
        # report) can be opened here; inside the host it is the same directory as /opt/ml.
        entrypoint=[mpirun_kit_exe, "entrypoint", "--no-sshd", *verbosity.entrypoint_flags(verbose, quiet),
                    "--opt-ml", HOST_OPT_ML],
        hyperparameters={LAUNCH_SPEC_HYPERPARAMETER: compiled.launch.to_json()},
        deadline_s=deadline, grace_s=t.grace_s, retries=compiled.job.retries)
    where = str(root) if root else f"{tempfile.gettempdir()}/{TEMP_ROOT_PREFIX}XXXXXXXX (made at start)"
    return DryRun("sim", compiled.job.name, request, notes=(
        f"per-host logs: {where}/attempt-<N>/<host>/entrypoint.log (N = 0, then 1.. for retries); what the "
        "ranks printed: entrypoint.out beside it",
        f"{HOST_OPT_ML} = {where}/attempt-<N>/<host>/opt_ml, that host's /opt/ml",
        "a temporary root is removed when the job succeeds and kept (and named) when it fails"
        if root is None else f"{root} is kept"))


def run_once(dry: DryRun, attempt: int, root: Path, *, clock: Clock = SYSTEM_CLOCK, out: BinaryIO | None = None,
             progress: StatusLine | None = None, latch: SignalLatch | None = None,
             err: BinaryIO | None = None, level: int = verbosity.VERBOSE) -> tuple[int, dict[str, int], Path]:
    """One attempt on a fresh cluster under ``root/attempt-N``: (exit code, each host's code, master's /opt/ml).

    What the ranks print (the entrypoints' stdout) goes to ``out``, everything else (the entrypoints' own
    lines, mpirun's messages) to ``err``, as on the other targets.  The hosts' entrypoints run under the one
    supervisor (exec/supervisor.py, ``SimHosts``); a stop during the bring-up ends it at once, before any
    entrypoint starts.
    """
    from ..sim.cluster import SimStopped

    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    req = dry.request
    progress = progress or StatusLine(clock=clock, level=level)
    latch = latch or SignalLatch(signals=())
    progress.update(f"sim: bringing up {req.hosts} host(s)")
    try:
        return _run_on_cluster(dry, attempt, root, clock, out, err, progress, latch)
    except SimStopped:   # stopped during the bring-up: nothing was started, the cluster is down again
        stop = latch.stop()
        progress.done(f"sim: {stop.why} during the bring-up; the cluster is torn down")
        return stop.exit_code, {}, root / f"attempt-{attempt}" / "algo-1" / "opt_ml"


def start_cluster(dry: DryRun, attempt: int, root: Path, *, clock: Clock = SYSTEM_CLOCK, out: BinaryIO | None = None,
                  err: BinaryIO | None = None, progress: StatusLine | None = None,
                  latch: SignalLatch | None = None) -> Started:
    """Bring up a fresh cluster under ``root/attempt-N`` and start every host's entrypoint; return at once with
    the cluster's name (the target's own id for the job) and the hosts, the child the one supervisor follows.
    The cluster stays up until the caller closes it (``SimHosts.close``: after the end, the master's files
    read); a failure here tears it down first.

    Raises:
        SimStopped: ``latch`` received a signal during or just after the bring-up (the cluster is down again).
    """
    from ..exec.sshkeys import SECRET_BYTES, format_secret
    from ..sim import SimCluster
    from ..sim.cluster import SimStopped

    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    req = dry.request
    progress = progress or StatusLine(clock=clock)
    latch = latch or SignalLatch(signals=())
    # The cluster records us as its owner: should we die by SIGKILL, the next sim, submit or jobs sweeps it.
    sim = SimCluster(req.hosts, root / f"attempt-{attempt}", req.name, instance_type=req.instance_type,
                     clock=clock, owner=os.getpid(), cancelled=lambda: latch.received is not None).__enter__()
    try:
        master = sim.hosts[0].name
        if latch.received:   # stopped just after the bring-up: nothing more is started
            raise SimStopped("stopped after the bring-up")
        sim.write_sagemaker_config(hyperparameters=req.hyperparameters)
        sim.write_job_secret(format_secret(os.urandom(SECRET_BYTES)))  # a new one per run, removed with the cluster
        procs = sim.start_entrypoints(req.entrypoint, split_output=True)
        tails = [(FileTail(sim.host(h).dir / name, "" if h == master else f"[{h} entrypoint] "), dst)
                 for h in procs for name, dst in (("entrypoint.out", out), ("entrypoint.log", err))]
        return Started(sim.name, SimHosts(procs, master, tails, req.grace_s, progress, clock, sim=sim))
    except BaseException:
        sim.down()
        raise


def _run_on_cluster(dry: DryRun, attempt: int, root: Path, clock: Clock, out: BinaryIO, err: BinaryIO,
                    progress: StatusLine, latch: SignalLatch) -> tuple[int, dict[str, int], Path]:
    req = dry.request
    hosts = start_cluster(dry, attempt, root, clock=clock, out=out, err=err, progress=progress, latch=latch).child
    master, opt_ml = hosts.master, hosts.sim.host(hosts.master).opt_ml
    try:
        ended = Supervisor(hosts, deadline_s=req.deadline_s, grace_s=req.grace_s + STOP_MARGIN_S,
                           requested=latch.stop, clock=clock, tick_s=0.2, deadline_what="the sim job").run()
        codes = {h: exit_code_of(p.returncode) if p.returncode is not None else ExitCode.SIGKILL
                 for h, p in hosts.procs.items()}
    finally:
        hosts.close()
    stopped = ended.stop.exit_code if ended.stop is not None else None
    code = stopped if stopped is not None else codes[master]
    summary = ", ".join(f"{h}={c}" for h, c in codes.items())
    if stopped is None:
        if len(set(codes.values())) == 1:
            progress.note(f"sim: every host finished ({summary})")
        else:
            progress.done(f"sim: hosts disagree ({summary}); the master's code {code} is the job's")
    else:
        progress.done(f"sim: stopped ({summary}); exit code {code}")
    return code, codes, opt_ml


class SimHosts:
    """The hosts' entrypoints as the supervisor's child (exec/supervisor.Child): polled (their output copied
    each tick), stopped through the master's entrypoint, killed with their process groups.

    A master that ends during a stop without the workers following (it died before it could tell them: a
    SIGTERM during its start-up ends it before its handlers exist) leaves them waiting for nobody: after
    WORKER_SETTLE_S they get SIGTERM, WORKER_STOP_S later SIGKILL, instead of the whole grace period.
    """

    def __init__(self, procs: dict, master: str, tails: list, grace_s: float, progress: StatusLine,
                 clock: Clock = SYSTEM_CLOCK, sim=None):
        self.procs, self.master, self.tails, self.grace_s, self.progress = procs, master, tails, grace_s, progress
        self.clock = clock
        self.sim = sim   # the cluster they run on (sim.SimCluster), torn down by ``close``
        self.master_gone: Deadline | None = None
        self.workers_termed = False

    def poll(self) -> int | None:
        for t, dst in self.tails:
            t.pump(dst)
        running = [h for h, p in self.procs.items() if p.poll() is None]
        if not running:
            return self.procs[self.master].returncode
        self.progress.update(f"sim: {len(self.procs) - len(running)}/{len(self.procs)} host(s) finished; "
                             f"running: {', '.join(running)}")
        return None

    def terminate(self, stop: Stop) -> float | None:
        # the signal submit got (a closed terminal's SIGHUP too), so the job's result says the same stop (#40)
        sig = signal.Signals[stop.signal] if stop.signal in ("SIGINT", "SIGTERM", "SIGHUP") else signal.SIGTERM
        _stop(self.procs[self.master], stop.why, self.grace_s, self.progress, sig)
        return None

    def stopping(self) -> float | None:
        if self.workers_termed or self.procs[self.master].poll() is None:
            return None
        if self.master_gone is None:
            self.master_gone = Deadline(self.clock, WORKER_SETTLE_S)   # its result may still be on its way
            return None
        if not self.master_gone.expired():
            return None
        self.workers_termed = True
        running = [h for h, p in self.procs.items() if p.poll() is None]
        self.progress.done(f"sim: the master's entrypoint ended; sending SIGTERM to host(s) {', '.join(running)}, "
                           f"which wait for it (SIGKILL {WORKER_STOP_S:g}s later)")
        for h in running:
            try:
                self.procs[h].send_signal(signal.SIGTERM)
            except (ProcessLookupError, OSError, ClusterError):
                pass   # it ended meanwhile
        return WORKER_STOP_S

    def kill(self) -> None:
        running = [h for h, p in self.procs.items() if p.poll() is None]
        self.progress.done(f"sim: host(s) {', '.join(running)} still running "
                           f"{'after their SIGTERM' if self.workers_termed else 'after the grace period'}; "
                           "killing them with the cluster")
        for h in running:
            signal_group(self.procs[h].popen.pid, signal.SIGKILL)   # nsenter and the entrypoint: one session

    def drain(self, deadline: Deadline) -> None:
        for t, dst in self.tails:
            t.pump(dst, final=True)

    def wait(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def close(self) -> None:
        """Tear the cluster down (its namespaces, sshd and whatever is left); its hosts' files stay under its root."""
        if self.sim is not None:
            self.sim.down()


def _stop(master, why: str, grace_s: float, progress: StatusLine, sig: int = signal.SIGTERM) -> None:
    """SIGTERM to the master's entrypoint: it forwards SIGTERM through mpirun to every rank on every host,
    SIGKILLs mpirun after the grace period and tells the workers the result, so they end too.

    (Signalling the workers' entrypoints as well would stop their MPI daemons under the ranks, whose
    last output, their handlers' included, would then never reach the master.)
    """
    progress.done(f"sim: {why}: sending {signal.Signals(sig).name} to the master's entrypoint (it stops every rank, SIGKILL "
                  f"{grace_s:g}s later; what is left {grace_s + STOP_MARGIN_S:g}s from now goes with the cluster)")
    if master.poll() is None:
        try:
            master.send_signal(sig)
        except (ProcessLookupError, OSError):
            pass  # it ended meanwhile


def run_outcome(dry: DryRun, *, clock: Clock = SYSTEM_CLOCK, out: BinaryIO | None = None,
                progress: StatusLine | None = None, level: int = verbosity.VERBOSE) -> Outcome:
    """Run on a fresh simulated cluster per attempt (up to 1 + retries); return how the job ended.
    ``level``: the status line's output level (core/verbosity.py; ``SubmitOptions.verbosity``)."""
    from ..sim.cluster import host_path
    from .local import refuse_unstartable

    req = dry.request
    # The hosts share this machine's files: a program that cannot start is refused before any bring-up.
    spec = json.loads(req.hyperparameters[LAUNCH_SPEC_HYPERPARAMETER])
    refuse_unstartable(dry.job, spec["program"], spec.get("working_dir"), host_path())
    progress = progress or StatusLine(clock=clock, level=level)
    root = Path(req.root) if req.root else Path(tempfile.mkdtemp(prefix=TEMP_ROOT_PREFIX))
    started = time.time()
    last: dict = {}

    def attempt(n: int) -> int:
        code, last["codes"], last["opt_ml"] = run_once(dry, n, root, clock=clock, out=out, progress=progress,
                                                       latch=latch)
        last["attempts"] = n + 1
        return code

    with SignalLatch() as latch:
        # A stop (Ctrl-C 130, SIGTERM 143) is never retried.
        code = retrying(attempt, req.retries, progress, permanent=STOPPED)
    codes, opt_ml, attempts = last["codes"], last["opt_ml"], last["attempts"]
    failure = opt_ml / "output" / "failure"
    text = failure.read_text(errors="replace") if code != 0 and failure.is_file() else None
    # The master's whole result beside the failure file (failures, hang, tail, the uncut reason), not its head.
    outcome = outcome_of("sim", dry.job, code, failure_text=text, failure_file=str(failure) if text else None,
                         interrupted=latch.received, attempts=attempts, started=started, ended=time.time(),
                         hosts=codes, launch=launch_timeline(failure.parent),
                         result=read_result_file(failure.parent / RESULT_FILE))
    if req.root is None and code == 0 and outcome.timeline and "launch" in outcome.timeline:
        outcome.timeline["launch"].pop("file")  # removed with the temporary root below
    if req.root is None:
        if code == 0:
            shutil.rmtree(root, ignore_errors=True)
        else:
            progress.done(f"sim: per-host logs kept in {root}")
    return outcome


def run(dry: DryRun, *, clock: Clock = SYSTEM_CLOCK, out: BinaryIO | None = None) -> int:
    """Run on the simulated cluster; return the job's exit code."""
    return run_outcome(dry, clock=clock, out=out).exit_code


class SimTarget(Target[SimRequest]):
    name = "sim"
    request_type = SimRequest

    def python(self, job) -> str:
        return sys.executable   # the simulated hosts share this machine's files, this interpreter included

    def choices(self, compiled, opts: SubmitOptions) -> dict:
        sim = compiled.job.target.sim
        # No root given: run_outcome makes a temporary one when the job starts (a dry run writes nothing).
        exe = shutil.which("mpirun_kit", path=os.path.dirname(sys.executable)) or "mpirun_kit"
        return {"root": Path(sim.root) if sim.root else None, "name": cluster_name(opts.job_id), "mpirun_kit_exe": exe,
                "verbose": opts.verbosity >= verbosity.VERBOSE, "quiet": opts.verbosity <= verbosity.QUIET}

    def dryrun(self, compiled, **choices) -> DryRun:
        return dryrun(compiled, **choices)

    def start(self, dry: DryRun, opts: SubmitOptions = SubmitOptions()) -> Started:
        """A fresh cluster up and every host's entrypoint started for ``dry``, at once (the first attempt's; the
        cluster's root is the request's, else a temporary directory the caller removes)."""
        root = Path(dry.request.root) if dry.request.root else Path(tempfile.mkdtemp(prefix=TEMP_ROOT_PREFIX))
        return start_cluster(dry, 0, root, progress=StatusLine(level=opts.verbosity))

    def run(self, dry: DryRun, opts: SubmitOptions = SubmitOptions(), *, started: float | None = None) -> Outcome:
        return run_outcome(dry, level=opts.verbosity)

    def handle(self, dry: DryRun) -> tuple[str | None, dict]:
        # The cluster's name is the job's on the simulated hosts: `sim list` shows the job id beside it.
        return dry.request.name, {"grace_s": dry.request.grace_s, "deadline_s": dry.request.deadline_s}


def cluster_name(job_id: str | None) -> str:
    """The simulated cluster's name for job ``job_id`` (``j`` and its random part, 1-12 lowercase letters and
    digits, so two jobs' clusters never collide); without a job (a dry run, a test), one per process."""
    if job_id:
        return ("j" + job_id.rsplit("-", 1)[-1])[:12]
    return f"s{os.getpid():x}"[:12]


TARGET = SimTarget()
