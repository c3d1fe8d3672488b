"""Worker role: serve sshd, follow the master and the local MPI daemon, exit with the job's code.

The master is the only authority on the result; the worker learns it over the
result channel and exits with it within milliseconds.  Everything else is a
bounded wait that ends in a clear non-zero exit, so a worker never hangs:

* master never accepts a connection within ``master_connect_s``  -> 75;
* master's connection closes, or it is silent for ``master_silence_s`` -> 75
  (local MPI daemons are stopped by pid so no orted is orphaned, ompi #7790);
* the MPI daemon never appears within ``daemon_wait_s + per_host * N`` while the
  master is alive -> 70;
* SIGTERM/SIGINT: the ranks here are left to the master's mpirun.  On SageMaker
  (StopTrainingJob, spot interruption) and under the ssh target's cancel every host
  gets the signal at once, and the master stops every rank itself (over the result
  channel: each rank's wrapper SIGTERMs its program and holds its exit until every
  handler is done or ``grace_s`` passed, exec/channel/stop.py; then mpirun ends, SIGKILL
  at the latest) through this host's MPI daemon, which also carries the ranks'
  last output: stopping that daemon here would kill the ranks under their SIGTERM
  handlers and lose what they print.  So the worker only waits for the master's
  result; if none comes within ``grace_s + STOP_MARGIN_S`` (the master is gone, or
  only this host was stopped) it stops its MPI daemons itself and exits 128+N.

Meanwhile the worker sends the master a heartbeat every ``HEARTBEAT_S``, so the
master can tell a lost worker host from a quiet one (``timeouts.worker_silence_s``).
"""
from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ExitCode, LaunchError, MasterLostError
from ..exec.channel.keys import remove_key_dir, worker_key_without_secret, write_key_dir
from ..exec.channel.link import MasterLink
from ..exec.channel.protocol import HEARTBEAT_S
from ..exec.daemon import alive, find_daemons, signal_pids
from ..exec.result import JobResult, result_from_message
from ..exec.signals import SignalLatch
from ..observe.timeline import Recorder
from ..plan.launch_plan import LaunchPlan
from .common import remove_session_dir, say, session_dir, write_failure, write_result

log = logging.getLogger(__name__)

RECV_TICK_S = 0.1
DAEMON_SCAN_S = 0.2
#: after a signal, how long past ``grace_s`` a worker waits for the master's result before it stops its
#: MPI daemons itself: the master's own SIGKILL comes at ``grace_s``, then mpirun's exit and the result.
STOP_MARGIN_S = 3.0


def run_worker(plan: LaunchPlan, me: str, opt_ml: Path, latch: SignalLatch, *, clock: Clock = SYSTEM_CLOCK,
               sshd: subprocess.Popen | None = None, log_stream: TextIO | None = None,
               worker_key: bytes | None = None, sshd_up: bool = False, job: str = "",
               progress: bool = True) -> JobResult:
    """Follow the job as worker ``me``; return the master's result.

    ``worker_key``: the workers' channel key (entrypoint/common.py); None = the job has no secret.
    ``job``: the job's name (inside every channel MAC and key, exec/channel/).
    ``sshd_up``: this host's sshd answered locally; the hello tells the master (readiness pushed).
    ``progress``: print the tool's progress lines (entrypoint/common.py ``say``); from the entrypoint's options.

    Raises:
        MasterLostError: the master never connected, died, or went silent.
        LaunchError: the MPI daemon never started on this host.
    """
    out = log_stream or sys.stderr
    t = plan.timeouts
    rec = Recorder(me, "worker", clock)      # sent to the master with the ack (observe/timeline.py)
    rec.mark_process_start()
    rec.mark("sshd_up")
    keys: list[str] = []     # this host's ranks' key directory, once written
    sessions: list[str] = []  # this run's MPI session base here (entrypoint/common.py session_dir)

    def on_keys(seed: bytes, run_nonce: bytes) -> None:
        # The master's seed for this host's ranks: their key files, before mpirun starts them (keys.py).
        mine = [r.rank for r in plan.ranks if r.host == me]
        sessions.append(session_dir(run_nonce.hex()))
        try:
            keys.append(write_key_dir(run_nonce.hex(), me, seed, job, mine))
            rec.mark("keys_written")    # the key hand-off, in the launch's account (observe/timeline.py)
        except OSError as exc:
            log.warning("worker %s: cannot write the ranks' key files (%s); ranks here will not report to the "
                        "result channel", me, exc)

    try:
        link = MasterLink.connect(plan.master, plan.result_port, me, Deadline(clock, t.master_connect_s),
                                  key=worker_key or worker_key_without_secret(plan.workers, plan.result_port, job),
                                  job=job, clock=clock, cancelled=latch, sshd_up=sshd_up, on_keys=on_keys)
    except MasterLostError as exc:
        write_failure(opt_ml, exc.exit_code, f"worker {me}: {exc}")
        raise
    say(out, f"worker {me}: connected to master {plan.master}; waiting for {'/'.join(plan.daemons)}", shown=progress)
    try:
        rec.mark("ready")
        result = _follow(plan, me, link, latch, clock, out, rec, progress=progress)
    except (MasterLostError, LaunchError) as exc:
        write_failure(opt_ml, exc.exit_code, f"worker {me}: {exc}")
        raise
    finally:
        link.close()
        for directory in keys:
            remove_key_dir(directory)
        for directory in sessions:
            remove_session_dir(directory)
        if sshd is not None and sshd.poll() is None:
            sshd.terminate()
    write_result(opt_ml, result)
    return result


def _follow(plan: LaunchPlan, me: str, link: MasterLink, latch: SignalLatch, clock: Clock, out: TextIO,
            rec: Recorder | None = None, progress: bool = True) -> JobResult:
    t = plan.timeouts
    last_heard = clock.monotonic()
    daemon_deadline = Deadline(clock, plan.daemon_deadline_s())
    daemons: tuple[int, ...] = ()
    daemon_state = "waiting"          # waiting -> running -> ended
    next_scan = 0.0
    next_beat = 0.0
    stop_deadline: Deadline | None = None
    while True:
        if clock.monotonic() >= next_beat:
            next_beat = clock.monotonic() + HEARTBEAT_S
            link.send({"type": "heartbeat"})
        try:
            msg = link.recv(RECV_TICK_S)
        except EOFError:
            signal_pids(alive(daemons), signal.SIGTERM)
            raise MasterLostError(
                f"worker {me}: master {plan.master} closed the result channel before sending a result "
                f"(MPI daemon {daemon_state}); the master entrypoint died or was killed: see its log") from None
        now = clock.monotonic()
        if msg is not None:
            last_heard = now
            if msg.get("type") == "result":
                ack = {"type": "ack", "host": me}
                if rec is not None:
                    rec.mark("result_received")
                    rec.mark("acked")
                    ack["timeline"] = rec.as_list()
                link.send(ack)
                code = msg["exit_code"]  # validated by MasterLink: an int 0-255
                say(out, f"worker {me}: job result from master: exit code {code}", shown=progress)
                return result_from_message(msg)
        if now - last_heard > t.master_silence_s:
            signal_pids(alive(daemons), signal.SIGTERM)
            raise MasterLostError(
                f"worker {me}: no heartbeat from master {plan.master} for {t.master_silence_s:g} s "
                f"(MPI daemon {daemon_state}); the master host is gone or unreachable; "
                "raise timeouts.master_silence_s if its network is slow")
        if latch.received and stop_deadline is None:
            # Not forwarded to the MPI daemon: the master's mpirun stops the ranks here (module docstring).
            log.warning("worker %s got %s: the master stops the ranks here (SIGTERM to each program, up to %g s for "
                        "its handler, then mpirun ends); "
                        "waiting up to %g s for its result", me, latch.received, t.grace_s, t.grace_s + STOP_MARGIN_S)
            stop_deadline = Deadline(clock, t.grace_s + STOP_MARGIN_S)
        if stop_deadline is not None and stop_deadline.expired():
            running = alive(daemons)
            signal_pids(running, signal.SIGTERM)
            code = ExitCode.for_signal(signal.Signals[latch.received].value)
            return JobResult(code, cause="interrupted", interrupted_by=latch.received,
                             reason=f"worker {me} stopped by {latch.received}; the master sent no result "
                                           f"within {t.grace_s + STOP_MARGIN_S:g} s (grace_s + {STOP_MARGIN_S:g} s)"
                                           + (f", so this host's MPI daemon(s) {', '.join(map(str, running))} were "
                                              "sent SIGTERM" if running else ""))
        if now >= next_scan:
            next_scan = now + DAEMON_SCAN_S
            if daemon_state == "waiting":
                daemons = find_daemons(plan.daemons)
                if daemons:
                    daemon_state = "running"
                    if rec is not None:
                        rec.mark("daemon_up")
                    log.info("worker %s: MPI daemon up (pid %s)", me, ", ".join(map(str, daemons)))
                elif daemon_deadline.expired():
                    raise LaunchError(
                        f"worker {me}: the MPI daemon ({'/'.join(plan.daemons)}) never started here within "
                        f"{plan.daemon_deadline_s():g} s although master {plan.master} is alive; mpirun on the "
                        "master could not reach this host over ssh, or it is still waiting for other hosts; "
                        "check the master's log, or raise timeouts.daemon_wait_s")
            elif daemon_state == "running" and not alive(daemons):
                daemon_state = "ended"
                log.info("worker %s: MPI daemon ended; waiting for the master's result", me)
