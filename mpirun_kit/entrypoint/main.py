"""Entrypoint flow: discover -> plan -> role -> run, returning the exit code every host shares.

Inputs merge in this order (later wins): the LaunchSpec in hyperparameters.json,
a ``--spec`` JSON file, then individual CLI flags.  The plan is built the same
way on every host, so each host knows the master, the result port and the MPI
daemon without asking anyone.

Signal handling starts before anything else: a SIGTERM while the plan is being
made (``mpirun --version`` included) is held, and the master still writes the
failure file and tells every worker the result.

The two facts of this machine the plan needs and the cluster files do not say, the
MPI flavour (``mpirun --version``, for the argv and the daemon a worker follows) and
the GPU count (NVML, where a driver is loaded; it sizes ``processes_per_host: auto``),
are read through cluster/local.py's ``Machine`` (the one reader of this machine, the CLI's too)
in a thread (``HostProbe``) started as soon as the spec says which are
needed.  Meanwhile the entrypoint does what needs neither: a worker waits for its
sshd, either role imports its modules and reads the job secret.  The plan is still one
pure value, built once both facts are in (``HostProbe.result``, with a deadline).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, TextIO

from ..core import verbosity
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..cluster import Cluster, elect_master
from ..cluster.discover import DEFAULT_OPT_ML, discover_cluster, read_hyperparameters
from ..cluster.local import Machine
from ..cluster.trust import private_dir, read_plan_input
from ..errors import LaunchError, SpecError
from ..exec.signals import SignalLatch
from ..spec.launch_spec import LaunchSpec
from ..plan.launch_plan import LaunchPlan, build_launch_plan, render, to_json
from ..exec.command import Cancelled, command_runner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EntrypointOptions:
    opt_ml: Path = DEFAULT_OPT_ML
    #: ``opt_ml`` must be this user's alone (made 0700, refused otherwise): `launch`'s default, in a shared /tmp.
    opt_ml_private: bool = False
    role: str = "auto"                 # auto | master | worker
    dry_run: bool = False
    json: bool = False
    start_sshd: bool = True
    sshd_config: str | None = None
    hosts: str | None = None
    hostfile: Path | None = None
    current_host: str | None = None
    spec_file: Path | None = None
    #: the job secret (``mpirun_kit keys new``); default: the SageMaker input channel's, when present.
    secret_file: Path | None = None
    program: tuple[str, ...] = ()
    #: the job's name, inside every result-channel key and MAC (exec/channel/); the same on every host.
    job: str = ""
    #: `mpirun_kit launch`: no entrypoint runs on the other hosts (none hands out its ranks' keys).
    launch: bool = False
    #: LaunchSpec fields given on the command line (name -> value); they win.
    overrides: tuple[tuple[str, object], ...] = ()
    #: the output level (core/verbosity.py), passed down from the CLI (-q, --no-progress, -v): progress lines at
    #: VERBOSE (`entrypoint`'s default), mpirun's rank-exit banners dropped at QUIET.  Library callers: VERBOSE.
    verbosity: int = verbosity.VERBOSE


def resolve_spec(opts: EntrypointOptions) -> LaunchSpec:
    """The LaunchSpec from hyperparameters, ``--spec`` and flags.

    Raises:
        SpecError: no program anywhere, or a source is invalid.
    """
    if opts.opt_ml_private:
        private_dir(opts.opt_ml, "launch directory (--opt-ml)")
    spec = LaunchSpec.from_hyperparameters(*hp) if (hp := read_hyperparameters(opts.opt_ml)) else None
    if opts.spec_file is not None:
        try:
            text = read_plan_input(Path(opts.spec_file), "launch spec")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise SpecError(f"{opts.spec_file}: cannot read launch spec ({why}); pass a LaunchSpec JSON file") from exc
        spec = LaunchSpec.from_json(text, str(opts.spec_file))
    changes = dict(opts.overrides)
    if opts.program:
        changes["program"] = tuple(opts.program)
    if spec is None:
        if "program" not in changes:
            raise SpecError(
                f"no program to run: {opts.opt_ml}/input/config/hyperparameters.json has no "
                "'mpirun_kit_launch' key and no --spec or '-- PROGRAM ARGS' was given; pass one of them")
        return LaunchSpec(**changes)
    return dataclasses.replace(spec, **changes)


#: how long ``mpirun --version`` may take.
VERSION_TIMEOUT_S = 30.0
#: the flavour a plan is built with when a signal stopped detection: that plan only carries
#: the stop to the workers (master, port, hosts), it never runs.
_STOPPED_FLAVOUR = "openmpi4"


class HostProbe:
    """This machine's MPI flavour and GPU count, read in a thread from ``start`` on; ``result`` joins it.

    Only what the spec leaves open is read: the flavour when ``mpi_flavour`` is ``auto``, the GPUs
    always (they size ``processes_per_host: auto``, and NVML is loaded only where a driver is).
    The machine is read through cluster/local.py's ``Machine`` (the one reader, which the CLI uses too)
    with exec/command.py's runner: a signal held by ``cancelled`` stops ``mpirun --version`` at once;
    the plan built then only carries the stop to the workers.
    """

    #: how long ``result`` waits past ``mpirun --version``'s own deadline (NVML has none of its own).
    JOIN_MARGIN_S = 30.0

    def __init__(self, spec: LaunchSpec, cancelled=lambda: None, clock: Clock = SYSTEM_CLOCK,
                 machine: Machine | None = None) -> None:
        self._auto = spec.mpi_flavour == "auto"
        self._clock = clock
        self.machine = machine or Machine(command_runner(timeout_s=VERSION_TIMEOUT_S, cancelled=cancelled, clock=clock))
        self._flavour, self._gpus = spec.mpi_flavour, 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, name="mpirun_kit-host-probe", daemon=True)

    def start(self) -> "HostProbe":
        self._thread.start()
        return self

    def _read(self) -> None:
        try:
            if self._auto:
                try:
                    self._flavour = self.machine.flavour(fallback=None)
                except Cancelled:
                    self._flavour = _STOPPED_FLAVOUR
            self._gpus = self.machine.gpu_count()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread by result(), raised there
            self._error = exc

    def result(self) -> tuple[str, int]:
        """(the flavour the plan is built with, the GPU count); waits for the thread, with a deadline.

        Raises:
            LaunchError: detection failed (``mpirun`` missing, unknown or hanging), or the thread did not
                end within VERSION_TIMEOUT_S + JOIN_MARGIN_S (NVML hangs: a broken driver).
        """
        deadline = Deadline(self._clock, VERSION_TIMEOUT_S + self.JOIN_MARGIN_S)
        while self._thread.is_alive() and not deadline.expired():
            self._thread.join(0.1)
        if self._thread.is_alive():
            raise LaunchError(f"GPU discovery (NVML) gave no answer within {VERSION_TIMEOUT_S + self.JOIN_MARGIN_S:g} "
                              "s; the NVIDIA driver on this host is broken: check `nvidia-smi`, or replace the host")
        if self._error is not None:
            raise self._error
        return self._flavour, self._gpus


def _master_of(opts: EntrypointOptions, cluster: Cluster) -> str:
    """The host that runs mpirun: a forced master (``--role master``, ``mpirun_kit launch``) is this host,
    whatever the election says; otherwise the elected one (cluster/election.py), the same on every host."""
    return cluster.current_host if opts.role == "master" else elect_master(cluster.host_names)


def plan_of(opts: EntrypointOptions, environ: Mapping[str, str], cluster: Cluster, spec: LaunchSpec,
            probe: HostProbe) -> LaunchPlan:
    """The plan from the discovered facts (pure once ``probe`` has answered)."""
    flavour, gpus = probe.result()
    return build_launch_plan(spec, cluster, environ, gpus, detected_flavour=flavour,
                             run_as_root=probe.machine.run_as_root(), cpu_count=probe.machine.cpu_count(),
                             python=sys.executable,
                             master=_master_of(opts, cluster))


def run_entrypoint(opts: EntrypointOptions, environ: Mapping[str, str], *, clock: Clock = SYSTEM_CLOCK,
                   out: TextIO | None = None) -> int:
    """Run this host's part of the job; return its exit code (the job's, on every host)."""
    out = out or sys.stdout
    log.info("entrypoint started")
    if opts.opt_ml_private:
        private_dir(opts.opt_ml, "launch directory (--opt-ml)")
    with SignalLatch() as latch:
        cluster = discover_cluster(opts.opt_ml, environ, hosts=opts.hosts, hostfile=opts.hostfile,
                                   current_host=opts.current_host)
        spec = resolve_spec(opts)
        probe = HostProbe(spec, cancelled=latch, clock=clock).start()   # beside everything up to plan_of
        me = cluster.current_host
        role = opts.role if opts.role != "auto" else ("master" if me == _master_of(opts, cluster) else "worker")

        def planned() -> LaunchPlan:
            plan = plan_of(opts, environ, cluster, spec, probe)
            log.info("plan ready: %s is %s", me, role)
            return plan

        if opts.dry_run:
            plan = planned()
            if opts.json:
                d = json.loads(to_json(plan))
                d.update(role=role, current_host=me)
                print(json.dumps(d, indent=2, sort_keys=True), file=out)
            else:
                out.write(f"this host  {me} (role {role})\n" + render(plan))
            return 0
        from .common import channel_worker_key

        worker_key = channel_worker_key(opts.secret_file, opts.opt_ml, multi_host=len(cluster.hosts) > 1, job=opts.job)
        if spec.result_port is None and len(cluster.hosts) > 1 and not opts.launch:
            # Every host derives the job's own port (a single-host job's master binds a free one): two jobs that
            # share a host never collide on a fixed port (issue #40).
            from .common import job_result_port

            spec = dataclasses.replace(spec, result_port=job_result_port(worker_key, cluster.host_names, opts.job))
        # Only this role's module: the master's pulls in mpirun supervision and the hang monitor, the
        # worker's psutil (its daemon scan); each costs the other role ~10 ms of CPU for nothing.
        if role == "master":
            from .master import run_master

            plan = planned()
            result = run_master(plan, environ, opts.opt_ml, latch, clock=clock, worker_key=worker_key, job=opts.job,
                                workers_run_entrypoints=not opts.launch,
                                progress=opts.verbosity >= verbosity.VERBOSE, quiet=opts.verbosity <= verbosity.QUIET)
        else:
            from .worker import run_worker

            sshd = None
            if opts.start_sshd:
                from ..exec.sshd import start_sshd

                # Returns once this host's sshd answers (ours or one already running), else raises; the
                # probe's mpirun --version and NVML run meanwhile.  The port is the spec's (the plan's is the same).
                sshd = start_sshd(spec.ssh_port, opts.sshd_config, clock=clock,
                                  probe_host=_local_probe_address(me))
            try:
                plan = planned()
            except BaseException:
                if sshd is not None and sshd.poll() is None:
                    sshd.terminate()   # run_worker would have, had there been a plan
                raise
            # Readiness is pushed only when this entrypoint saw its sshd answer (it started it, or found it
            # answering); with --no-sshd the master's own probe finds it (a local probe here would cost an
            # sshd connection per host for nothing the master does not learn anyway).
            sshd_up = opts.start_sshd
            result = run_worker(plan, me, opts.opt_ml, latch, clock=clock, sshd=sshd, worker_key=worker_key,
                                sshd_up=sshd_up, job=opts.job, progress=opts.verbosity >= verbosity.VERBOSE)
    if opts.json:
        print(json.dumps({"host": me, "role": role, "exit_code": result.exit_code, "summary": result.summary}),
              file=out)
    return result.exit_code


def _local_probe_address(me: str) -> str:
    """Where this host's own sshd is probed: its cluster address (sshd may listen only there)."""
    try:
        return socket.gethostbyname(me)
    except OSError:
        return "127.0.0.1"
