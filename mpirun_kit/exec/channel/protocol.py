"""What the result channel's messages may say: each one checked against the plan before it counts.

Place in the data flow: server.py calls these on every message whose MAC (wire.py) was valid, and
link.py on the master's messages to a worker.  Pure functions of the message and the plan.

Rank messages: ``{"type": "rank", "event": "start"|"exit"|..., "rank", "host", "t", ...}`` (the events
``progress``, ``stacks``, ``sample`` and ``finish`` are checked by observe/hang.py's ``check_observe_report``,
injected as the server's ``check_other``); worker messages: ``hello`` (with its ``host``), ``heartbeat``,
``ack``; the master's: ``keys`` (the host seed, keys.py), ``heartbeat``, ``result``, and to ranks
``signal``, ``release`` (stop.py), ``stacks``, ``watch`` (start sampling, with ``stall_s``) and ``finish``
(let a rank that called exit leave MPI_Finalize) (observe/relay.py).
"""
from __future__ import annotations

import math
import signal
from typing import Mapping

#: how often a worker tells the master it is alive.
HEARTBEAT_S = 1.0
_SIGNAL_NAMES = frozenset(s.name for s in signal.Signals)


def is_time(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_rank_identity(msg: dict, rank_hosts: Mapping[int, str]) -> str:
    """Why ``msg`` does not come from a rank of this plan at a sane time; "" when it does."""
    rank, host, t = msg.get("rank"), msg.get("host"), msg.get("t")
    if not is_int(rank) or rank not in rank_hosts:
        return f"rank {str(rank)[:40]!r} is not a rank of this job (0-{len(rank_hosts) - 1})"
    if host != rank_hosts[rank]:
        return f"rank {rank} reported host {str(host)[:80]!r}; the plan places it on {rank_hosts[rank]}"
    if not is_time(t):
        return f"time {str(t)[:40]!r} is not a finite number"
    return ""


def check_rank_report(msg: dict, rank_hosts: Mapping[int, str]) -> tuple[dict | None, str]:
    """A start/exit report reduced to its known fields, or (None, why) when it does not fit the plan."""
    event = msg.get("event")
    if event not in ("start", "exit"):
        return None, f"unknown rank event {str(event)[:40]!r}"
    why = check_rank_identity(msg, rank_hosts)
    if why:
        return None, why
    rank = msg["rank"]
    clean = {"type": "rank", "event": event, "rank": rank, "host": msg["host"], "t": float(msg["t"])}
    if event == "start":
        if is_int(msg.get("local_rank")):
            clean["local_rank"] = msg["local_rank"]
        for name in ("pid", "program_pid"):        # the wrapper's and its program's
            if is_int(msg.get(name)):
                clean[name] = msg[name]
        _launch_account(msg, clean, START_ACCOUNT)
        return clean, ""
    code, sig = msg.get("exit_code"), msg.get("signal")
    if (code is None) == (sig is None):
        return None, "an exit report needs exactly one of exit_code and signal"
    if code is not None and not (is_int(code) and 0 <= code <= 255):
        return None, f"exit_code {str(code)[:40]!r} is not an integer 0-255"
    if sig is not None and sig not in _SIGNAL_NAMES:
        return None, f"signal {str(sig)[:40]!r} is not a signal name"
    clean.update(exit_code=code, signal=sig)
    _launch_account(msg, clean, EXIT_ACCOUNT)
    return clean, ""


#: the launch's account a wrapper adds to its reports (rank/wrapper.py; observe/timeline.py keeps them):
#: start: when the wrapper and its parent (the MPI daemon) started, when it had its key, its CPU to its program's
#: start; exit: its whole CPU, when its channel connection was greeted.  Optional; a value that is not a finite
#: number (a CPU time: not negative) is left out, never refused: they are figures, not facts the job relies on.
START_ACCOUNT = ("proc_t", "parent_t", "key_t", "cpu_s")
EXIT_ACCOUNT = ("cpu_s", "hello_t")


def _launch_account(msg: dict, clean: dict, names: tuple[str, ...]) -> None:
    for name in names:
        v = msg.get(name)
        if is_time(v) and (name != "cpu_s" or v >= 0):
            clean[name] = float(v)


def valid_from_master(msg: dict) -> bool:
    """Whether a master's message to a worker has the fields the worker reads."""
    if msg.get("type") == "heartbeat":
        return True
    if msg.get("type") == "keys":
        seed = msg.get("seed")
        return isinstance(seed, str) and len(seed) == 64 and all(c in "0123456789abcdef" for c in seed)
    return (msg.get("type") == "result" and is_int(msg.get("exit_code")) and 0 <= msg["exit_code"] <= 255
            and isinstance(msg.get("result", {}), dict))   # read by exec/result.py result_from_message
