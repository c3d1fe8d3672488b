"""Master side: wait until every worker's sshd answers, all hosts in parallel.

A probe is a TCP connect plus reading the ``SSH-`` banner: it proves sshd is
accepting connections without a key exchange per attempt (the SageMaker toolkit
does a full paramiko login per host, one host after another, every second).
Each host retries with jittered backoff from 0.1 s to 1 s until one deadline
that scales with the host count; the error names every host that never answered.
"""
from __future__ import annotations

import logging
import random
import socket
import threading
from typing import Callable, Sequence

from ..core.backoff import Backoff
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import SSHUnreachableError

log = logging.getLogger(__name__)

#: probe(host, port, timeout) -> None when sshd answered; raises OSError (or returns a reason) otherwise.
Probe = Callable[[str, int, float], "str | None"]


def banner_probe(host: str, port: int, timeout: float) -> str | None:
    """None when ``host:port`` answers with an SSH banner, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            data = b""
            while b"\n" not in data and len(data) < 256:
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
    except socket.gaierror as exc:
        return f"name does not resolve ({exc.strerror})"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None if data.startswith(b"SSH-") else f"answered without an SSH banner ({data[:40]!r})"


def wait_reachable(hosts: Sequence[str], port: int, timeout_s: float, *, clock: Clock = SYSTEM_CLOCK,
                   probe: Probe = banner_probe, cancelled: Callable[[], bool] = lambda: False,
                   rng: random.Random | None = None, on_ready: Callable[[str, float], None] | None = None,
                   progress: Callable[[tuple[str, ...], float], None] | None = None,
                   progress_every_s: float = 10.0,
                   pushed: Callable[[str, float], bool] | None = None) -> dict[str, float]:
    """Probe every host in parallel until all answer or ``timeout_s`` passes.

    ``pushed(host, seconds)`` waits up to ``seconds`` for ``host`` to report itself ready (its
    entrypoint's hello on the result channel) and says whether it did: between probes a host's
    thread waits on it instead of sleeping, so a pushed host is ready at once; a host that runs
    no entrypoint is still found by the TCP + banner probe.

    ``progress(pending_hosts, elapsed_s)`` is called every ``progress_every_s`` while
    some hosts have not answered (a long wait says what it is waiting for).

    Returns:
        host -> seconds until it first answered.

    Raises:
        SSHUnreachableError: some hosts never answered (named, with their last error).
    """
    deadline = Deadline(clock, timeout_s)
    rng = rng or random.Random()
    ready: dict[str, float] = {}
    last_error: dict[str, str] = {}
    lock = threading.Lock()

    def one(host: str, seed: float) -> None:
        backoff = Backoff(clock, deadline, random.Random(seed))
        while not cancelled():
            why = None if pushed is not None and pushed(host, 0) else \
                probe(host, port, max(0.1, min(3.0, deadline.remaining())))
            if why is None:
                with lock:
                    ready[host] = deadline.elapsed()
                if on_ready:
                    on_ready(host, ready[host])
                return
            with lock:
                last_error[host] = why
            if deadline.remaining() <= 0:
                return
            pause = backoff.pause()
            if pushed is None:
                clock.sleep(pause)
            elif pushed(host, pause):
                with lock:
                    ready[host] = deadline.elapsed()
                if on_ready:
                    on_ready(host, ready[host])
                return

    threads = [threading.Thread(target=one, args=(h, rng.random()), daemon=True, name=f"ssh-probe-{h}")
               for h in hosts]
    for t in threads:
        t.start()
    next_progress = progress_every_s
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.05)
            if progress is not None and deadline.elapsed() >= next_progress:
                next_progress += progress_every_s
                with lock:
                    pending = tuple(h for h in hosts if h not in ready)
                if pending:
                    progress(pending, deadline.elapsed())
    missing = [h for h in hosts if h not in ready]
    if missing:
        detail = "; ".join(f"{h}: {last_error.get(h, 'not probed')}" for h in missing)
        stopped = " (stopped by a signal)" if cancelled() else ""
        raise SSHUnreachableError(
            f"sshd on {len(missing)} of {len(hosts)} worker host(s) never answered on port {port} within "
            f"{timeout_s:g} s{stopped}: {detail}. Check that those hosts started and run sshd, that their names "
            "resolve, or raise timeouts.ssh_ready_s", tuple(missing))
    return ready
