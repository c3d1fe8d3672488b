"""Master role: result channel up, workers' sshd answering, mpirun run, result out to every host.

Order matters: the result channel starts first (workers connect to it while
they start sshd, and ranks report into it), then the parallel sshd wait, then
mpirun.  Whatever happens after the channel is up (sshd never answers, mpirun
fails, SIGTERM), the master ends by writing the failure file, publishing the
result to every worker in parallel, and waiting briefly for their acks, so no
worker is left guessing.
"""
from __future__ import annotations

import ctypes
import logging
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Mapping, TextIO

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import LaunchError, SSHUnreachableError
from ..exec.channel import ResultServer
from ..exec.process import LauncherExit, run_launcher
from ..exec.result import JobResult, job_result
from ..exec.signals import SignalLatch
from ..exec.ssh import wait_reachable
from ..plan.launch_plan import LaunchPlan
from ..plan.mpi import get_flavour
from .common import write_failure

log = logging.getLogger(__name__)

#: after mpirun fails, how long to wait for rank exit reports still in flight.
REPORT_GRACE_S = 1.0
#: how long the master waits for workers to acknowledge the result before it exits.
ACK_WAIT_S = 2.0


def _parent_death_signal():
    """A preexec_fn giving mpirun SIGTERM when the entrypoint dies (so it never outlives a SIGKILLed
    master), or None where prctl is unavailable.  mpirun may exit at once on it, without stopping
    its ranks (it gets the signal once per thread, and a second SIGTERM means "exit now"); the rank
    wrappers then see their parent die and stop their programs (rank.die_with_parent).  prctl is looked up here, before the fork: the child
    of a multi-threaded parent must not run the dynamic loader."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def bind_address(plan: LaunchPlan) -> str:
    """The address workers and ranks reach the master at: its name as this host resolves it.

    Raises:
        LaunchError: the master's name does not resolve here.
    """
    try:
        return socket.gethostbyname(plan.master)
    except OSError as exc:
        raise LaunchError(f"master host name {plan.master!r} does not resolve on the master itself ({exc}); "
                          "fix /etc/hosts or DNS so every host resolves every host name") from exc


def run_master(plan: LaunchPlan, environ: Mapping[str, str], opt_ml: Path, latch: SignalLatch, *,
               clock: Clock = SYSTEM_CLOCK, bind: str | None = None, log_stream: TextIO | None = None) -> JobResult:
    """Run the job as master; return the JobResult every host exits with.

    Raises:
        LaunchError: the result channel cannot be opened (port taken, name unresolvable).
    """
    out = log_stream or sys.stderr
    bind = bind or bind_address(plan)
    try:
        server = ResultServer(bind, plan.result_port, clock=clock).start()
    except OSError as exc:
        raise LaunchError(f"cannot open the result channel on {bind}:{plan.result_port} ({exc.strerror}); "
                          "another job may hold the port: set result_port in the launch spec") from exc
    result: JobResult | None = None
    try:
        workers = plan.workers
        if workers:
            print(f"mpirun_kit: master {plan.master}: waiting for sshd on {len(workers)} worker(s) "
                  f"(deadline {plan.ssh_deadline_s():g} s)", file=out, flush=True)
            try:
                ready = wait_reachable(
                    workers, plan.ssh_port, plan.ssh_deadline_s(), clock=clock, cancelled=latch,
                    progress=lambda pending, t: print(
                        f"mpirun_kit: still waiting for sshd on {len(pending)} host(s) after {t:.0f} s: "
                        f"{', '.join(pending[:10])}{' ...' if len(pending) > 10 else ''}", file=out, flush=True))
                print(f"mpirun_kit: all {len(workers)} worker sshd answered in {max(ready.values()):.2f} s",
                      file=out, flush=True)
            except SSHUnreachableError as exc:
                if not latch.received:
                    result = JobResult(exc.exit_code, summary=str(exc))
                    raise
        if latch.received:
            result = JobResult(128 + signal.Signals[latch.received].value,
                               summary=f"the master entrypoint received {latch.received} before mpirun started")
            return result
        env = {**environ, **dict(plan.env)}
        print(f"mpirun_kit: launching {len(plan.ranks)} ranks on {len(plan.hosts)} host(s)", file=out, flush=True)
        log.info("mpirun starting: %s", " ".join(plan.argv[:6]))
        lex = run_launcher(
            plan.argv, env, rank_hosts={r.rank: r.host for r in plan.ranks},
            tag_regex=get_flavour(plan.mpi_flavour).tag_regex,
            cancelled=lambda: latch.received, grace_s=plan.timeouts.grace_s,
            job_timeout_s=plan.timeouts.job_s, cwd=plan.working_dir, clock=clock,
            preexec_fn=_parent_death_signal())
        log.info("mpirun exited: code %s, signal %s", lex.returncode, lex.signal)
        result = _result_of(lex, server, plan)
        return result
    finally:
        if result is None:
            result = JobResult(70, summary="the master entrypoint failed before the job ran; see its log")
        _finish(server, plan, result, opt_ml, out)


def _result_of(lex: LauncherExit, server: ResultServer, plan: LaunchPlan) -> JobResult:
    failed = lex.returncode != 0 or lex.signal is not None
    if failed and not server.rank_failures():
        # mpirun can exit before the failing rank's report has been read; wait for it briefly.
        server.wait_rank_events(lambda evs: any(e.get("event") == "exit" and (e.get("signal") or e.get("exit_code"))
                                                for e in evs), REPORT_GRACE_S)
    result = job_result(lex.returncode, lex.signal, server.rank_failures(), lex.tail, lex.interrupted_by)
    if lex.timed_out and lex.interrupted_by is None:
        result = replace(result, exit_code=124,
                         summary=f"the job ran past its deadline of {plan.timeouts.job_s:g} s and was stopped\n"
                                 + result.summary)
    return result


def _finish(server: ResultServer, plan: LaunchPlan, result: JobResult, opt_ml: Path, out: TextIO) -> None:
    try:
        if result.exit_code != 0:
            path = write_failure(opt_ml, result.summary)
            print(f"mpirun_kit: job failed with exit code {result.exit_code}"
                  + (f"; failure written to {path}" if path else "") + "\n" + result.summary, file=out, flush=True)
        sent = server.publish(result)
        connected = server.connected_workers()
        late = server.wait_acks(connected, ACK_WAIT_S) if connected else frozenset()
        log.info("result %d published to %d worker(s); not acknowledged: %s", result.exit_code, sent,
                 sorted(late) or "none")
    finally:
        server.close()
