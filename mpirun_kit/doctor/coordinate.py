"""The doctor across hosts: gather every host's facts in parallel, judge, run the allreduce.

Place in the data flow::

    DoctorRequest (pure value; --dry-run prints its commands)
      -> commands(): the argv run on each host (locally, or over an ssh session of
         exec/remote.py, paramiko with host keys verified, the same one the ssh
         target uses: it joins the argv, the one boundary)
      -> run_doctor(): facts from every host in parallel + timing windows
         -> checks.check_host / check_cluster / check_allreduce
      -> DoctorReport (rows + facts) -> report.py

The coordinator is whichever host runs ``mpirun_kit doctor``; it gathers its own
facts in-process and every other host's with ``mpirun_kit doctor --gather-only``
over ssh, which is also what proves that host's sshd and keys work.
"""
from __future__ import annotations

import logging
import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ..core.programs import cli_argv
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError, MpirunKitError, SpecError
from ..exec.command import spawn
from ..workloads import allreduce as ar
from .checks import AllreduceResult, Check, Expectations, check_allreduce, check_cluster, check_host
from .facts import HostFacts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DoctorRequest:
    """Everything one doctor run does, decided before anything runs."""

    #: every host of the job, in rank order; the first is the allreduce's rank 0.
    hosts: tuple[str, ...]
    #: the host this runs on (its facts are gathered in-process, not over ssh).
    local_host: str
    python: str
    #: python on the other hosts (default: the same path as here, true when every host runs one image).
    remote_python: str | None = None
    expect: Expectations = field(default_factory=Expectations)
    mounts: tuple[str, ...] = ()
    ssh_dir: str = "/root/.ssh"
    ssh_port: int = 22
    ssh_connect_timeout_s: int = 5
    #: seconds for gathering facts from all hosts, and separately for the allreduce.
    timeout_s: float = 120.0
    #: hosts gathered at once (ssh sessions in flight); 1 = one host after another.
    max_parallel: int = 32
    allreduce: bool = True
    ranks_per_host: int = 1
    allreduce_bytes: int = 8 << 20
    allreduce_iters: int = 5
    allreduce_port: int = 29499

    def __post_init__(self) -> None:
        if not self.hosts:
            raise SpecError("doctor: no hosts; pass --hosts algo-1,algo-2 (or none for this host only)")
        if len(set(self.hosts)) != len(self.hosts):
            dup = sorted({h for h in self.hosts if self.hosts.count(h) > 1})
            raise SpecError(f"doctor: host(s) {dup} listed twice in --hosts; name each host once")
        if self.ranks_per_host < 1:
            raise SpecError(f"doctor: --ranks-per-host {self.ranks_per_host}: expected 1 or more")
        if self.max_parallel < 1:
            raise SpecError(f"doctor: --max-parallel {self.max_parallel}: expected 1 or more")

    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.ranks_per_host

    @property
    def runs_allreduce(self) -> bool:
        return self.allreduce and self.world_size > 1

    def ssh_settings(self) -> dict:
        """How every other host is reached (exec/remote.paramiko_client): the job's key and known_hosts
        from ``ssh_dir``, host keys verified (an unknown or changed key fails), this user."""
        keys = [f"{self.ssh_dir}/{k}" for k in ("id_ed25519", "id_ecdsa", "id_rsa")]
        return {"user": None, "port": self.ssh_port, "connect_timeout_s": self.ssh_connect_timeout_s,
                "known_hosts": f"{self.ssh_dir}/known_hosts",
                "identity_file": next((k for k in keys if os.path.exists(k)), None)}

    def describe(self, host: str, argv: list[str]) -> str:
        """How ``argv`` runs on ``host``, as --dry-run prints it (the remote string is exactly what is sent)."""
        if host == self.local_host:
            return shlex.join(argv)
        # The one place a shell is unavoidable: ssh hands the remote shell a string.
        return (f"ssh -p {self.ssh_port} {host} (paramiko; host key checked against {self.ssh_dir}/known_hosts) "
                f"-- {shlex.quote(shlex.join(argv))}")

    def python_on(self, host: str) -> str:
        return self.python if host == self.local_host else (self.remote_python or self.python)

    def gather_argv(self, host: str) -> list[str]:
        argv = [*cli_argv(self.python_on(host)), "doctor", "--gather-only", "--as-host", host,
                "--hosts", ",".join(self.hosts), "--ssh-dir", self.ssh_dir, "--ssh-port", str(self.ssh_port)]
        for m in self.mounts:
            argv += ["--mount", m]
        return argv

    def allreduce_argvs(self) -> list[tuple[str, int, list[str]]]:
        """(host, rank, argv) for every rank; ranks fill hosts in order."""
        out = []
        for i, host in enumerate(self.hosts):
            for j in range(self.ranks_per_host):
                rank = i * self.ranks_per_host + j
                argv = ar.worker_argv(self.python_on(host), rank=rank, world_size=self.world_size, local_rank=j,
                                      master=self.hosts[0], port=self.allreduce_port, nbytes=self.allreduce_bytes,
                                      iters=self.allreduce_iters, timeout_s=self.timeout_s)
                out.append((host, rank, argv))
        return out

    def commands(self) -> list[str]:
        """Every command this request runs, as a shell would read it (for --dry-run)."""
        lines = [f"# {self.local_host}: gather facts in-process"]
        lines += [self.describe(h, self.gather_argv(h)) for h in self.hosts if h != self.local_host]
        if self.runs_allreduce:
            lines += [self.describe(h, argv) for h, _, argv in self.allreduce_argvs()]
        return lines


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[Check, ...]
    facts: tuple[HostFacts, ...] = ()
    allreduce: AllreduceResult | None = None
    unreachable: tuple[tuple[str, str], ...] = ()

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")


class DoctorCheckFailed(MpirunKitError):
    """One or more checks failed (exit 1: the doctor's own code, documented in `doctor --help`)."""

    exit_code = 1


class DoctorUnreachableError(ClusterError):
    """Facts could not be gathered from some hosts (exit 69, as for any unreachable host)."""


def raise_for_status(report: DoctorReport) -> None:
    """Turns a report's failures into the exception the CLI maps to the exit code.

    Raises:
        DoctorUnreachableError: a host could not be gathered (wins over other failures).
        DoctorCheckFailed: any other failing check; the message lists each with its fix.
    """
    if report.unreachable:
        hosts = ", ".join(f"{h} ({why})" for h, why in report.unreachable)
        raise DoctorUnreachableError(f"doctor: could not gather facts from {hosts}; check that each is up and "
                                     "accepts ssh with the job's key (ssh HOST true)")
    if report.failed:
        items = "; ".join(f"{c.host}/{c.name}: {c.detail}" + (f" -> {c.fix}" if c.fix else "")
                          for c in report.failed)
        raise DoctorCheckFailed(f"doctor: {len(report.failed)} check(s) failed: {items}")


#: starts ``argv`` on a host with stdout/stderr captured -> a process with ``communicate``/``kill``/``returncode``
#: (raises ClusterError when the host cannot be reached); tests of the coordinator use the real one.
Starter = Callable[[DoctorRequest, str, list[str]], object]


def _start(req: DoctorRequest, host: str, argv: list[str]):
    if host == req.local_host:
        return spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from ..exec.remote import bounded, start_remote

    # the host ends the gather itself past the doctor's deadline (a root login's session would not)
    return start_remote(req.ssh_settings(), host, bounded(argv, req.timeout_s))


def _finish(proc: subprocess.Popen, deadline: Deadline) -> tuple[int | None, str, str]:
    """(exit code or None on timeout, stdout, stderr); a process past the deadline is killed by pid."""
    try:
        out, err = proc.communicate(timeout=max(deadline.remaining(), 0.01))
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, out, err


def _tail(text: str, n: int = 3) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:]) if lines else "no output"


def gather_all(req: DoctorRequest, gather_local: Callable[[], HostFacts], *, clock: Clock = SYSTEM_CLOCK,
               start: Starter = _start) -> tuple[dict[str, HostFacts], dict[str, str], dict[str, tuple[float, float]]]:
    """Facts of every host (remote ones in parallel), the failures, and each host's timing window."""
    facts: dict[str, HostFacts] = {}
    unreachable: dict[str, str] = {}
    windows: dict[str, tuple[float, float]] = {}
    deadline = Deadline(clock, req.timeout_s)
    remote = [h for h in req.hosts if h != req.local_host]
    if remote:
        log.info("doctor: gathering facts from %d host(s): %s", len(remote), ", ".join(remote))

    def one(host: str) -> None:
        sent = clock.time()
        try:
            proc = start(req, host, req.gather_argv(host))
        except ClusterError as exc:
            unreachable[host] = str(exc)
            return
        code, out, err = _finish(proc, deadline)
        received = clock.time()
        if code is None:
            unreachable[host] = f"no answer within {req.timeout_s:g} s ({_tail(err)})"
        elif code != 0:
            unreachable[host] = f"exit {code}: {_tail(err)}"
        else:
            # The facts are one JSON line, printed last; a login banner or rc-file chatter
            # before it must not make a healthy host look broken.
            lines = [l for l in out.splitlines() if l.strip()]
            try:
                facts[host] = HostFacts.from_json(lines[-1] if lines else "", f"facts from {host}")
                windows[host] = (sent, received)
            except SpecError as exc:
                unreachable[host] = str(exc)

    with ThreadPoolExecutor(max_workers=min(req.max_parallel, max(len(remote), 1))) as pool:
        futures = [pool.submit(one, h) for h in remote]
        if req.local_host in req.hosts:
            # No timing window: the coordinator's own clock is the reference, not a peer.
            facts[req.local_host] = gather_local()
        for f in futures:
            f.result()
    return facts, unreachable, windows


def run_allreduce(req: DoctorRequest, *, clock: Clock = SYSTEM_CLOCK, start: Starter = _start) -> AllreduceResult:
    """Start every rank at once, wait for all under one deadline, read rank 0's timing."""
    ranks = req.allreduce_argvs()
    backend = "nccl/gloo"
    log.info("doctor: allreduce smoke test, %d ranks on %d host(s), rank 0 on %s:%d",
             len(ranks), len(req.hosts), req.hosts[0], req.allreduce_port)
    # torch imports and the rendezvous come on top of the collective's own timeout.
    deadline = Deadline(clock, req.timeout_s + 30.0)
    procs = []
    for host, rank, argv in ranks:
        try:
            procs.append((host, rank, start(req, host, argv)))
        except ClusterError as exc:
            for _, _, p in procs:
                p.kill()
            return AllreduceResult(req.world_size, backend, error=f"rank {rank} on {host} not started: {exc}")
    results = [(host, rank, *_finish(p, deadline)) for host, rank, p in procs]
    failed = [(h, r, c, err) for h, r, c, _out, err in results if c != 0]
    logs = tuple((f"{h} rank {r}", _tail(err, 5)) for h, r, c, err in failed)
    if failed:
        h, r, c, err = failed[0]
        why = "ran past the deadline" if c is None else f"exited {c}"
        return AllreduceResult(req.world_size, backend, error=f"rank {r} on {h} {why}: {_tail(err)}", logs=logs)
    res = ar.parse_result(results[0][3])
    if res is None:
        return AllreduceResult(req.world_size, backend, error="rank 0 printed no result", logs=logs)
    algbw, busbw = ar.bus_bandwidth(res["bytes"], res["seconds"], res["world_size"])
    return AllreduceResult(res["world_size"], res["backend"], res["bytes"], res["seconds"], algbw, busbw)


def run_doctor(req: DoctorRequest, gather_local: Callable[[], HostFacts], *, clock: Clock = SYSTEM_CLOCK,
               start: Starter = _start) -> DoctorReport:
    """Gather, judge, smoke-test.  Never raises for an unhealthy cluster: that is in the rows."""
    facts, unreachable, windows = gather_all(req, gather_local, clock=clock, start=start)
    rows: list[Check] = []
    for host in req.hosts:
        if host in facts:
            rows += check_host(facts[host], req.expect)
    rows += check_cluster(facts, unreachable, windows, req.expect)
    result = None
    if req.runs_allreduce:
        if unreachable:
            result = AllreduceResult(req.world_size, "nccl/gloo",
                                     error=f"not run: {', '.join(sorted(unreachable))} unreachable")
        else:
            result = run_allreduce(req, clock=clock, start=start)
    rows.append(check_allreduce(result))
    return DoctorReport(tuple(rows), tuple(facts[h] for h in req.hosts if h in facts), result,
                        tuple(sorted(unreachable.items())))
