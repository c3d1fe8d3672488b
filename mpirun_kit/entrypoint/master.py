"""Master role: result channel up, workers' sshd answering, mpirun run, result out to every host.

Order matters: the result channel starts first (workers connect to it while
they start sshd, and ranks report into it), then the parallel sshd wait, then
mpirun.  Whatever happens after the channel is up (sshd never answers, mpirun
fails, SIGTERM, a worker host lost), the master ends by writing the failure file,
publishing the result to every worker, and waiting briefly for their acks, so no
worker is left guessing.

The channel's run key and run nonce are made here, once per run (exec/channel/keys.py): each worker
gets its host's seed after its hello, this host's ranks get their key files from here before mpirun
starts, and only the run nonce (no secret: it names the key files' directory) goes through mpirun's
environment (the plan's argv names it with ``-x``).  A worker
silent for ``timeouts.worker_silence_s`` (its host died or its network was cut:
no FIN ever arrives, and mpirun does not notice) stops mpirun like a SIGTERM
would, and every host exits with ``ExitCode.HOST_LOST``, naming the lost host.
"""
from __future__ import annotations

import logging
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Mapping, TextIO

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ExitCode, LaunchError, SSHUnreachableError
from ..exec.channel import keyhost
from ..exec.channel.keys import new_run_key, remove_key_dir, worker_key_without_secret, write_key_dir
from ..exec.channel.server import ResultServer
from ..exec.channel.stop import HOLD_MARGIN_S, RankStop
from ..exec.process import LauncherExit, run_launcher
from ..plan.contract import RESULT_ADDR_VAR, RUN_NONCE_VAR
from ..exec.result import JobResult, RankFailure, job_result
from ..exec.signals import SignalLatch
from ..exec.ssh import wait_reachable
from ..observe import timeline
from ..observe.hang import HangMonitor, check_observe_report
from ..plan.env import FORWARD_HOW, launcher_env
from ..plan.launch_plan import RANK_MODULE, LaunchPlan
from ..plan.mpi import get_flavour
from ..redact import is_secret, redact_text
from .common import port_holder, remove_session_dir, say, session_dir, write_result

log = logging.getLogger(__name__)

#: after mpirun fails, how long to wait for rank exit reports still in flight.
REPORT_GRACE_S = 1.0
#: how long the master waits for workers to acknowledge the result before it exits.
ACK_WAIT_S = 2.0
#: a rank's failure reported (its program exited non-zero or by a signal) while mpirun runs on this long: the
#: master stops the job itself, which ends with that rank's code.  mpirun usually ends first (Open MPI's
#: orte_abort_on_non_zero_status, srun's --kill-on-bad-exit, Hydra): this holds where a launcher or a user's MCA
#: setting lets the other ranks wait on for a rank that is gone (issue #40: fail fast, within 10 s).
FAIL_FAST_S = 5.0


class FailFast:
    """Whether a rank's reported failure has outlived ``FAIL_FAST_S`` under a running mpirun (polled by the
    launcher's ``cancelled``); ``fired``: the master stopped the job for it."""

    def __init__(self, server: ResultServer, clock: Clock, after_s: float = FAIL_FAST_S) -> None:
        self.server, self.clock, self.after_s = server, clock, after_s
        self.seen_at: float | None = None
        self.fired = False

    def due(self) -> bool:
        if self.seen_at is None:
            if not self.server.rank_failures():
                return False
            self.seen_at = self.clock.monotonic()
        if not self.fired and self.clock.monotonic() - self.seen_at >= self.after_s:
            log.warning("a rank failed %g s ago and mpirun runs on: stopping the job (fail fast)", self.after_s)
            self.fired = True
        return self.fired


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


def host_addresses(plan: LaunchPlan, bind: str) -> dict[str, frozenset[str]]:
    """Where each of the job's hosts connects from: its name as this host resolves it (the master's own
    host also from its bind address and loopback: its ranks reach it locally)."""
    found: dict[str, set[str]] = {plan.master: {bind, "127.0.0.1"}}
    for h in plan.hosts:
        try:
            found.setdefault(h.name, set()).add(socket.gethostbyname(h.name))
        except OSError as exc:
            log.warning("host %s does not resolve here (%s); its connections to the result channel will be "
                        "refused", h.name, exc)
    return {h: frozenset(a) for h, a in found.items()}


def with_rejections(result: JobResult, counts: Mapping[str, int]) -> JobResult:
    """``result`` with the result channel's refusals, by kind (its JSON's ``rejections``; none: unchanged)."""
    if not counts:
        return result
    return replace(result, rejections=dict(counts))


def run_master(plan: LaunchPlan, environ: Mapping[str, str], opt_ml: Path, latch: SignalLatch, *,
               clock: Clock = SYSTEM_CLOCK, bind: str | None = None, log_stream: TextIO | None = None,
               worker_key: bytes | None = None, job: str = "", workers_run_entrypoints: bool = True,
               progress: bool = True, quiet: bool = False) -> JobResult:
    """Run the job as master; return the JobResult every host exits with.

    Args:
        worker_key: the workers' channel key (entrypoint/common.py); None = the job has no secret.
        job: the job's name (inside every channel MAC and key, exec/channel/).
        workers_run_entrypoints: False for `mpirun_kit launch`: no worker says hello, so the workers' key is
            random per run (no hello can be forged), and the other hosts' ranks get their key directories over
            the ssh mpirun uses (exec/channel/keyhost.py) before mpirun starts; a host whose hand-off fails is
            named, and its ranks run without reports (and are not expected to report).
        progress: print the tool's progress lines (entrypoint/common.py ``say``); from the entrypoint's options.
        quiet: -q: mpirun's banners that only restate a rank's exit are left out (exec/process.py).

    Raises:
        LaunchError: the result channel cannot be opened (port taken, name unresolvable).
    """
    out = log_stream or sys.stderr
    _say_env_left_out(plan)
    bind = bind or bind_address(plan)
    t = plan.timeouts
    rec = timeline.Recorder(plan.master, "master", clock)   # phases -> <opt_ml>/output/timeline.json
    rec.mark_process_start()
    rec.mark("sshd_up")
    rank_hosts = {r.rank: r.host for r in plan.ranks}
    monitor = HangMonitor(rank_hosts, t.stall_s, t.hang_abort_after(), opt_ml,
                          lambda ranks: server.send_to_ranks(ranks, {"type": "stacks"}), clock=clock, out=out,
                          progress_to_out=progress,
                          # the ranks' wrappers watch their programs from outside (observe/relay.py)
                          send=lambda ranks, msg: server.send_to_ranks(ranks, msg))
    try:
        addresses = host_addresses(plan, bind)
        server = ResultServer(
            # no port in the plan: a free one, the kernel's choice (a single-host job; its ranks learn it below)
            bind, plan.result_port or 0, job=job, run_key=new_run_key(),
            # `launch` (no workers' entrypoints): a key nobody holds, never one derived from what the ranks see.
            worker_key=worker_key or (worker_key_without_secret(plan.workers, plan.result_port or 0, job)
                                      if workers_run_entrypoints else new_run_key()),
            rank_hosts={r.rank: r.host for r in plan.ranks}, workers=plan.workers,
            allowed_peers=frozenset().union(*addresses.values()), host_addresses=addresses,
            clean_timeline=timeline.clean_records, worker_silence_s=t.worker_silence_s, clock=clock,
            on_rank_event=monitor.on_report, check_other=check_observe_report).start()
    except OSError as exc:
        holder = port_holder(plan.result_port) if plan.result_port else "none found"
        raise LaunchError(f"cannot open the result channel on {bind}:{plan.result_port or 0} ({exc.strerror}); "
                          f"the port's holder on {plan.master}: {holder}; stop it, or leave result_port unset "
                          "(a port per job) or set another one in the launch spec") from exc
    result: JobResult | None = None
    started = False
    finishing = False
    keys: str | None = None
    handoff: keyhost.Handoff | None = None
    try:
        keys = _write_own_rank_keys(server, plan, job)
        workers = plan.workers
        if workers and not workers_run_entrypoints and get_flavour(plan.mpi_flavour).uses_ssh:
            # `launch`: the other hosts' key directories over ssh, beside the sshd wait below (keyhost.py).
            handoff = _start_handoff(server, plan, job)
        # srun starts ranks, or mpirun's daemons inside a Slurm allocation, through each node's slurmd: no worker's
        # sshd is needed then (LaunchPlan.worker_sshd).
        if workers and plan.worker_sshd:
            say(out, f"master {plan.master}: waiting for sshd on {len(workers)} worker(s) "
                     f"(deadline {plan.ssh_deadline_s():g} s)", shown=progress)
            try:
                # Pushed readiness (a worker's hello says its sshd answers) or the TCP + banner probe,
                # whichever comes first: hosts without our entrypoint are found by the probe.
                ready = wait_reachable(
                    workers, plan.ssh_port, plan.ssh_deadline_s(), clock=clock, cancelled=latch,
                    pushed=server.wait_sshd_up,
                    progress=lambda pending, t: say(
                        out, f"still waiting for sshd on {len(pending)} host(s) after {t:.0f} s: "
                             f"{', '.join(pending[:10])}{' ...' if len(pending) > 10 else ''}", shown=progress))
                say(out, f"all {len(workers)} worker sshd answered in {max(ready.values()):.2f} s", shown=progress)
            except SSHUnreachableError as exc:
                if not latch.received:
                    result = JobResult(exc.exit_code, reason=str(exc), cause="unreachable")
                    raise
        if handoff is not None:
            keyhost.wait_ready(handoff, Deadline(clock, plan.ssh_deadline_s()), clock)
        rec.mark("ready")
        if latch.received:
            result = JobResult(ExitCode.for_signal(signal.Signals[latch.received].value), cause="interrupted",
                               reason=f"the master entrypoint received {latch.received} before mpirun started",
                               interrupted_by=latch.received)
            finishing = True
            return _finished(server, plan, keys, result, opt_ml, out, rec, everyone=True, progress=progress)
        # Local ranks inherit mpirun's environment: the ranks' allow-list, as on every other host (plan/env.py).
        env = {**launcher_env(environ, plan.env),
               RUN_NONCE_VAR: _run_nonce_value(server, plan, workers_run_entrypoints, handoff),
               # the port the channel holds (the plan's, or the kernel's choice): the ranks' -x RESULT_ADDR_VAR
               RESULT_ADDR_VAR: f"{plan.master}:{server.port}"}
        session_dir = _session_dir(plan, server, environ)
        if session_dir is not None:
            env[get_flavour(plan.mpi_flavour).session_dir_env] = session_dir
        say(out, f"launching {len(plan.ranks)} ranks on {len(plan.hosts)} host(s)", shown=progress)
        log.info("mpirun starting: %s", " ".join(plan.argv[:6]))
        rec.mark("mpirun_started")
        started = True
        monitor.start()
        failfast = FailFast(server, clock)
        lex = run_launcher(
            plan.argv, env, rank_hosts={r.rank: r.host for r in plan.ranks},
            tag_regex=get_flavour(plan.mpi_flavour).tag_regex,
            cancelled=lambda: latch.received or ("SIGTERM" if server.lost_workers() or monitor.stop_asked()
                                                 or failfast.due() else None),
            grace_s=t.grace_s, job_timeout_s=t.job_s, cwd=plan.working_dir, clock=clock,
            parent_death_signal=signal.SIGTERM,
            # A stop reaches the ranks over the channel first: mpirun would SIGKILL them 1 s after its SIGTERM.
            rank_stop=RankStop(server, rank_hosts, t.grace_s + HOLD_MARGIN_S), quiet=quiet)
        log.info("mpirun exited: %s", f"killed by {lex.signal}" if lex.signal else f"code {lex.returncode}")
        rec.mark("mpirun_exited")
        monitor.stop()
        result = _result_of(lex, server, plan, latch.received, monitor, failed_fast=failfast.fired)
        if result.exit_code == 0:
            result = _missing_reports(server, plan, result, _keyed_hosts(server, plan, workers_run_entrypoints,
                                                                          handoff))
        if monitor.hang is not None:
            result = replace(result, hang=monitor.hang)     # --json and result.json carry the stall (observe/hang.py)
        rec.hang, rec.exit_code = monitor.hang, int(result.exit_code)    # the timeline's stall and stop marks
        finishing = True
        return _finished(server, plan, keys, result, opt_ml, out, rec, everyone=False, progress=progress)
    finally:
        if not finishing:   # an error before the job's result was made
            monitor.stop()
            _finished(server, plan, keys, result or JobResult(
                ExitCode.LAUNCH_FAILED, reason="the master entrypoint failed before the job ran; see its log",
                cause="launch_failed"),
                opt_ml, out, rec, everyone=not started, progress=progress)
        if handoff is not None:
            handoff.close(clock=clock)      # every other host's key directory goes


def _say_env_left_out(plan: LaunchPlan) -> None:
    """Name, once, the launching host's variables that reach no rank, each with why and how to send it: the
    ones left out on purpose (secrets, AWS credentials, another launcher's state) as a warning, the others
    (not on the allow-list) in the log (plan/env.py)."""
    by_why: dict[str, list[str]] = {}
    for name, why in plan.env_dropped:
        by_why.setdefault(why, []).append(name)
    for why, names in by_why.items():
        log.warning("env: not forwarded to the ranks: %s (%s)", ", ".join(names), why)
    if plan.env_left:
        log.info("env: not forwarded to the ranks (not on the allow-list): %s; %s to send one",
                 ", ".join(plan.env_left), FORWARD_HOW)


def _finished(server: ResultServer, plan: LaunchPlan, keys: str | None, result: JobResult, opt_ml: Path,
              out: TextIO, rec: timeline.Recorder, everyone: bool, progress: bool) -> JobResult:
    """The job's end on the master: key files gone, refusals counted into the result, the result out."""
    remove_key_dir(keys)
    remove_session_dir(session_dir(server.run_nonce.hex()))
    counts = server.rejection_counts()
    if counts:
        log.warning("result channel: refused by kind: %s", ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
    result = with_rejections(result, counts)
    _finish(server, plan, result, opt_ml, out, rec, everyone=everyone, progress=progress)
    return result


def _session_dir(plan: LaunchPlan, server: ResultServer, environ: Mapping[str, str]) -> str | None:
    """The base of this run's MPI session directories on every host (plan/mpi.py ``session_dir_env``), named by
    the run nonce: two jobs whose hosts share a name and a /tmp (PID-namespaced hosts) never share one.  The
    launcher makes it and removes what it put there (this host's base goes in ``_finished``, a worker's at its end);
    None when the flavour has none, or the user set it."""
    name = get_flavour(plan.mpi_flavour).session_dir_env
    if name is None or name in environ or name in dict(plan.env):
        return None
    return session_dir(server.run_nonce.hex())


def _start_handoff(server: ResultServer, plan: LaunchPlan, job: str) -> keyhost.Handoff:
    """`launch`: one ssh per other host, carrying its seed to the key writer there (exec/channel/keyhost.py)."""
    by_host: dict[str, list[int]] = {}
    for r in plan.ranks:
        if r.host != plan.master:
            by_host.setdefault(r.host, []).append(r.rank)
    argv = list(plan.argv)
    python = next((argv[i - 1] for i in range(1, len(argv) - 1) if argv[i] == "-m" and argv[i + 1] == RANK_MODULE),
                  sys.executable)
    t = plan.timeouts
    hold = (t.job_s or 7 * 86400.0) + t.grace_s + plan.ssh_deadline_s() + 60.0
    return keyhost.start(by_host, {h: server.host_seed(h) for h in by_host}, run_nonce_hex=server.run_nonce.hex(),
                         job=job, python=python, ssh_port=plan.ssh_port, hold_s=hold)


def _keyed_hosts(server: ResultServer, plan: LaunchPlan, workers_run_entrypoints: bool,
                 handoff: keyhost.Handoff | None) -> set[str]:
    """The hosts whose ranks got key files (so report): every host when entrypoints run everywhere; under
    `launch`, the master's and those whose ssh hand-off succeeded."""
    if workers_run_entrypoints or not plan.workers:
        return {h.name for h in plan.hosts}
    return {plan.master} | set(server.connected_workers()) | (handoff.ready if handoff is not None else set())


def _run_nonce_value(server: ResultServer, plan: LaunchPlan, workers_run_entrypoints: bool,
                     handoff: keyhost.Handoff | None = None) -> str:
    """What the ranks get in MPIRUN_KIT_RUN_NONCE: the run nonce; for `mpirun_kit launch`, ``@`` and the hosts
    whose ranks got key files (the master's, and those the ssh hand-off reached): ranks elsewhere start at once
    without reports instead of waiting for a key file.  With entrypoints everywhere, a worker whose hello is
    still on its way writes its ranks' files as soon as its seed arrives; its wrappers wait for them
    (keys.KEY_WAIT_S), never mpirun."""
    if workers_run_entrypoints or not plan.workers:
        return server.run_nonce.hex()
    keyed = _keyed_hosts(server, plan, workers_run_entrypoints, handoff)
    unkeyed = [h.name for h in plan.hosts if h.name not in keyed]
    if unkeyed:
        log.warning("result channel: ranks on %s run without reports to the master (no key hand-off)",
                    ", ".join(unkeyed))
    return server.run_nonce.hex() + "@" + ",".join(sorted(keyed))


def _missing_reports(server: ResultServer, plan: LaunchPlan, result: JobResult, keyed: set[str]) -> JobResult:
    """``result`` (a success), or a failure of its own cause when a rank that ran never reported its exit: mpirun
    exited 0, so the rank ran, and its host handed it a key; its report was lost or blocked (an attack on the
    channel, or a bug), and a job whose ranks' fate the master does not know is not a success."""
    expected = {r.rank for r in plan.ranks if r.host in keyed}
    if not expected:
        return result
    server.wait_rank_events(lambda evs: expected <= {e["rank"] for e in evs if e["event"] == "exit"},
                            REPORT_GRACE_S)
    missing = sorted(expected - server.exited_ranks())
    if not missing:
        return result
    hosts = sorted({r.host for r in plan.ranks if r.rank in missing})
    shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
    return replace(result, exit_code=ExitCode.LAUNCH_FAILED, cause="report_missing", reason=(
        f"rank(s) {shown} on {', '.join(hosts[:10])} ran (mpirun exited 0) but never reported their exit to the "
        f"result channel, so their fate is unknown: a wrapper could not take its key or reach the master, or "
        f"something blocked its reports; see the ranks' lines 'mpirun_kit.rank: ...' and the master's log"))


def _write_own_rank_keys(server: ResultServer, plan: LaunchPlan, job: str) -> str | None:
    """This host's ranks' key directory (exec/channel/keys.py), or None: without it its ranks run but do not
    report."""
    mine = [r.rank for r in plan.ranks if r.host == plan.master]
    if not mine:
        return None
    try:
        return write_key_dir(server.run_nonce.hex(), plan.master, server.host_seed(plan.master), job, mine)
    except OSError as exc:
        log.warning("cannot write the ranks' key files (%s); ranks on %s will not report to the result channel",
                    exc, plan.master)
        return None


def _result_of(lex: LauncherExit, server: ResultServer, plan: LaunchPlan, signalled: str | None,
               monitor: HangMonitor | None = None, failed_fast: bool = False) -> JobResult:
    """The job's result; ``signalled``: the signal the entrypoint itself received, if any; ``failed_fast``: the
    master stopped mpirun for a rank's failure (FailFast), which is then the root cause, not a stop."""
    exiting = monitor.exit_failure() if monitor is not None else None
    if exiting is not None and signalled is None:
        # A rank called exit and sat in MPI_Finalize while the others waited for it, and its exit could not be let
        # go on (observe/hang.py): the job ends with the code its stacks showed (1 when they did not), naming it.
        first = RankFailure(exiting["rank"], exiting["host"], exiting["code"] or ExitCode.FAILED, None, exiting["t"])
        return job_result(lex.returncode, lex.signal, (first,), (), None)
    if monitor is not None and monitor.hung() and lex.interrupted_by is not None and signalled is None:
        return JobResult(ExitCode.HUNG, cause="hung", reason=(
            f"hung: no rank advanced within {plan.timeouts.hang_abort_after():g} s of the hang report "
            f"(timeouts.hang_abort_s{'' if plan.timeouts.hang_abort_s is not None else ', default 2 x stall_s'}"
            f"); mpirun was stopped.  Fix the hang the report names, then resume from the last checkpoint\n"
            + monitor.last_report()))
    lost = server.lost_workers()
    if lost and lex.interrupted_by is not None and signalled is None:
        hosts = ", ".join(sorted(lost))
        silent = ", ".join(f"{h} for {s:.1f} s" for h, s in sorted(lost.items()))
        closed = sorted(set(lost) & server.closed_workers())
        why = ("its host died or its network was cut" if not closed else
               f"{', '.join(closed)} closed its connection first (its entrypoint exited or was killed: see its "
               "log); any other stopped answering: its host died or its network was cut")
        return JobResult(ExitCode.HOST_LOST, cause="host_lost", launcher_code=lex.returncode,
                         launcher_signal=lex.signal, tail=_redacted_tail(lex, plan), reason=(
            f"host lost: worker {hosts} stopped answering on the result channel (silent {silent}; limit "
            f"timeouts.worker_silence_s = {plan.timeouts.worker_silence_s:g} s): {why}; mpirun was stopped.  "
            "Check that host's instance and network; resume from the last checkpoint"))
    failed = lex.returncode != 0 or lex.signal is not None
    if failed and not server.rank_failures():
        # mpirun can exit before the failing rank's report has been read; wait for it briefly.
        server.wait_rank_events(lambda evs: any(e.get("event") == "exit" and (e.get("signal") or e.get("exit_code"))
                                                for e in evs), REPORT_GRACE_S)
    # mpirun's last lines go into the failure file and FailureReason: the ranks' secret env values are hidden
    # wherever they appear, not only behind a secret-looking name (mpirun_kit/redact.py).
    result = job_result(lex.returncode, lex.signal, server.rank_failures(), _redacted_tail(lex, plan),
                        None if failed_fast and signalled is None else lex.interrupted_by)
    if lex.timed_out and lex.interrupted_by is None:
        # the ranks the deadline's stop ended are its consequences: none of them is the root cause
        result = replace(result, exit_code=ExitCode.TIMEOUT, cause="timeout", root_cause=None,
                         reason=f"the job ran past its deadline of {plan.timeouts.job_s:g} s and was stopped")
    return result


def _redacted_tail(lex: LauncherExit, plan: LaunchPlan) -> tuple[str, ...]:
    """mpirun's last lines, with the ranks' secret env values hidden wherever they appear."""
    known = [v for n, v in plan.env if is_secret(n)]
    return tuple(redact_text(line, known) for line in lex.tail)


def _finish(server: ResultServer, plan: LaunchPlan, result: JobResult, opt_ml: Path, out: TextIO,
            rec: timeline.Recorder | None = None, everyone: bool = False, progress: bool = True) -> None:
    """Failure file, result to the workers, their acks.  ``everyone``: wait for every worker of the plan, not
    only the connected ones (mpirun never started, so some may still be connecting and must hear the result)."""
    try:
        # result.json (and on failure the failure file) before anything else can fail; the text printed here
        # leaves out mpirun's last lines, just printed on this same stream (the failure file keeps them).
        path = write_result(opt_ml, result)
        if result.exit_code != 0:
            # A stop (a signal, the deadline) is not a failure of the job: said as what it is (H2, issue #28).
            text = result.text(tail=False, limit=None)
            if result.cause == "hung":
                # The hang report was printed on this stream when the hang was found (observe/hang.py): its
                # suspects are named once here; the failure file keeps the whole report.
                text = text.split("\n", 1)[0] + "\n(the hang report above names the suspects; the failure file " \
                                                  "and hang-report.txt keep it)"
            print(f"mpirun_kit: job {'stopped' if result.kind in ('interrupted', 'timeout') else 'failed'} with "
                  f"exit code {result.exit_code}"
                  + (f"; failure written to {path}" if path else "") + "\n" + text, file=out, flush=True)
        sent = server.publish(result)
        if rec is not None:
            rec.mark("result_published")
        # A worker still connecting gets the result on hello.  Hosts that run no entrypoint (`mpirun_kit
        # launch`) never connect: once mpirun ran, only connected workers are waited for.
        waiting_for = (set(plan.workers) if everyone else set(server.connected_workers())) \
            - set(server.lost_workers())
        late = server.wait_acks(waiting_for, ACK_WAIT_S) if waiting_for else frozenset()
        if rec is not None:
            _write_timeline(server, plan, rec, opt_ml, out, progress)
        if plan.workers:
            log.info("job result (exit code %d) sent to %d of %d worker(s)", result.exit_code, sent,
                     len(plan.workers))
        if late:
            log.warning("worker(s) %s did not confirm receiving the job result within %g s",
                        ", ".join(sorted(late)), ACK_WAIT_S)
    finally:
        server.close()


def _write_timeline(server: ResultServer, plan: LaunchPlan, rec: timeline.Recorder, opt_ml: Path,
                    out: TextIO, progress: bool = True) -> None:
    """Merge every host's phases and the ranks' reports into <opt_ml>/output/timeline.json; never raises."""
    rec.mark("acked")
    rec.mark("exited")
    data = timeline.merge(rec, server.worker_timelines(), server.rank_events(), plan.workers)
    try:
        path = timeline.write(opt_ml, data)
    except OSError as exc:
        log.warning("could not write the timeline to %s/output: %s", opt_ml, exc)
        return
    say(out, f"{timeline.summary_line(data)} (mpirun_kit timeline {path})", shown=progress)
