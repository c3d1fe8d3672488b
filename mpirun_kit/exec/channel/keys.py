"""The result channel's keys: who derives which, and how a rank's key reaches its wrapper only.

Place in the data flow::

    job secret (exec/sshkeys.py) + job name  -> worker_key        every host, at start
    master, once per run                     -> run key, run nonce
    run key + job + host                     -> host seed         master; sent to that host's worker
                                                                  on its authenticated connection
    host seed + job + rank                   -> rank key          master (to check), the host's entrypoint
                                                                  (to hand over), never the program

A rank's key is handed to its wrapper in a file, not in the environment (a program reads its
parent's environment from /proc/$PPID/environ): the host's entrypoint writes
``<key dir>/<host>/rank-<N>.key`` (directories 0700, file 0600) before mpirun starts the rank, and
the wrapper reads it and removes it before it starts the program.  The key directory's name holds
the run nonce, which reaches the wrapper through mpirun's environment (it is no secret).  So a
program holds no key, and even a key that leaks signs for one rank only, which must also come
from its planned host and cannot take over a connection the rank already has (server.py).

Stdlib only: the rank wrapper imports ``take_rank_key`` at start.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import time

_LABEL_WORKERS = b"mpirun_kit result channel workers v2"
_LABEL_HOST = b"mpirun_kit result channel host seed v2"
_LABEL_RANK = b"mpirun_kit result channel rank v2"
#: how long a wrapper waits for its key file (its host's entrypoint writes it when the master's seed arrives).
KEY_WAIT_S = 10.0
_KEY_POLL_S = 0.02


def worker_key_from_secret(secret: bytes, job: str) -> bytes:
    """The workers' key: HMAC of the job secret under its own label and the job name (never the ssh keys)."""
    return hmac.new(secret, _LABEL_WORKERS + b"\0" + job.encode(), hashlib.sha256).digest()


def worker_key_without_secret(hosts, port: int, job: str) -> bytes:
    """The workers' key when the job has no secret: derived from public facts, so it only keeps out
    peers that know neither the job's hosts nor its name.  Ranks stay authenticated (their keys come
    from a run key made per run); the entrypoint warns that worker messages are not."""
    return hashlib.sha256(_LABEL_WORKERS + b"\0public\0" + ",".join(sorted(hosts)).encode()
                          + b"\0" + str(port).encode() + b"\0" + job.encode()).digest()


def new_run_key() -> bytes:
    return os.urandom(32)


def host_seed(run_key: bytes, job: str, host: str) -> bytes:
    """What the master sends ``host``'s worker: enough for that host's ranks' keys, no other host's."""
    return hmac.new(run_key, _LABEL_HOST + b"\0" + job.encode() + b"\0" + host.encode(), hashlib.sha256).digest()


def rank_key(seed: bytes, job: str, rank: int) -> bytes:
    return hmac.new(seed, _LABEL_RANK + b"\0" + job.encode() + b"\0" + str(rank).encode(), hashlib.sha256).digest()


def key_dir(run_nonce_hex: str) -> str:
    """Where this run's rank key files live on a host: in memory (/dev/shm) where there is one."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"
    return os.path.join(base, f"mpirun_kit-keys-{run_nonce_hex}")


def rank_key_path(directory: str, host: str, rank: int) -> str:
    return os.path.join(directory, host, f"rank-{rank}.key")


def write_rank_keys(directory: str, host: str, seed: bytes, job: str, ranks) -> list[str]:
    """Write one 0600 key file per rank of ``host`` (directories 0700); returns the paths.

    Raises:
        OSError: the directory cannot be made or written.
    """
    from ...core.files import write_atomic  # not at import: the wrapper imports this module, and needs none of it

    host_dir = os.path.join(directory, host)
    os.makedirs(host_dir, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    os.chmod(host_dir, 0o700)
    paths = []
    for r in ranks:
        paths.append(str(write_atomic(rank_key_path(directory, host, r),
                                      f"{rank_key(seed, job, r).hex()}\n{job}\n", 0o600)))
    return paths


def remove_rank_keys(directory: str, host: str) -> None:
    """Remove ``host``'s key files left unread (ranks that never started), then the directories if empty."""
    host_dir = os.path.join(directory, host)
    try:
        names = os.listdir(host_dir)
    except OSError:
        return
    for name in names:
        try:
            os.unlink(os.path.join(host_dir, name))
        except OSError:
            pass
    for d in (host_dir, directory):
        try:
            os.rmdir(d)
        except OSError:
            pass


def take_rank_key(directory: str, host: str, rank: int, wait_s: float = KEY_WAIT_S,
                  monotonic=time.monotonic, sleep=time.sleep) -> tuple[bytes, str] | None:
    """(key, job) from this rank's key file, which is removed; None when none appears within ``wait_s``
    or it is malformed (the rank then runs without reports, as it must when the channel is down)."""
    path = rank_key_path(directory, host, rank)
    end = monotonic() + wait_s
    while True:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read(4096)
            break
        except FileNotFoundError:
            if monotonic() >= end:
                return None
            sleep(_KEY_POLL_S)
        except (OSError, UnicodeDecodeError):
            return None
    try:
        os.unlink(path)
    except OSError:
        pass
    key_hex, _, rest = text.partition("\n")
    job = rest.rstrip("\n")
    try:
        key = bytes.fromhex(key_hex)
    except ValueError:
        return None
    return (key, job) if len(key) == 32 else None
