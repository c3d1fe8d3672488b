"""The result channel's keys: who derives which, and how a rank's key reaches its wrapper only.

Place in the data flow::

    job secret (exec/sshkeys.py) + job name  -> worker_key        every host, at start
    `launch` (no secret, no workers)         -> a random worker key made per run (nobody else holds it)
    master, once per run                     -> run key, run nonce
    run key + job + host                     -> host seed         master; sent to that host's worker on its
                                                                  authenticated connection, sealed to the
                                                                  workers' key (seal_seed), or handed over ssh
                                                                  (`launch`, keyhost.py)
    host seed + job + rank                   -> rank key          master (to check), the host's entrypoint
                                                                  (to hand over), never the program

A rank's key is handed to its wrapper in a file, not in the environment (a program reads its parent's
environment from /proc/$PPID/environ).  The host's entrypoint makes a key directory for its ranks before
mpirun starts them (``write_key_dir``):

* made with ``mkdir`` under a random name (never ``exist_ok``), filled, then renamed into place, so the
  directory appears whole: every rank's file is in it from the moment a wrapper can see it;
* its final name holds the run nonce (public: the wrapper learns it from mpirun's environment), a tag of the
  host, the writer's pid (for the sweep) and 128 random bits: nothing sent on the network names it, so no
  other user can make it first;
* a wrapper (``take_rank_key``) accepts only a directory that ``lstat`` shows is a directory of its own uid
  with mode 0700, and a key file opened ``O_NOFOLLOW | O_NONBLOCK`` that ``fstat`` shows is a regular file of
  its uid, mode 0600: a planted symlink, FIFO or device is refused, and never blocks the wait, whose deadline
  reads the injected clock;
* the wrapper removes its file, then waits (``wait_siblings``, same deadline) until every other rank of the
  host took its own, before its program starts: no program can read a sibling's key file;
* key directories of dead runs (their writer's pid gone) are swept whenever one is made (``sweep_stale``).

Stdlib only: the rank wrapper imports this module at start, on the launch's critical path.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import os
import stat

from ...core.clock import SYSTEM_CLOCK, Clock, Deadline

_LABEL_WORKERS = b"mpirun_kit result channel workers v2"
_LABEL_HOST = b"mpirun_kit result channel host seed v2"
_LABEL_RANK = b"mpirun_kit result channel rank v2"
_LABEL_SEAL = b"mpirun_kit result channel seed seal v1"
#: how long a wrapper waits for its key file (its host's entrypoint writes it when the master's seed arrives),
#: and then for its siblings to take theirs.
KEY_WAIT_S = 10.0
_KEY_POLL_S = 0.01
#: every key directory's name starts with this (then the run nonce, the host tag, the writer's pid, a random token).
KEY_DIR_PREFIX = "mpirun_kit-keys-"
_STAGING = "." + KEY_DIR_PREFIX + "staging-"
_MAX_KEY_FILE = 4096


def worker_key_from_secret(secret: bytes, job: str) -> bytes:
    """The workers' key: HMAC of the job secret under its own label and the job name (never the ssh keys)."""
    return hmac.new(secret, _LABEL_WORKERS + b"\0" + job.encode(), hashlib.sha256).digest()


def worker_key_without_secret(hosts, port: int, job: str) -> bytes:
    """The workers' key when an entrypoint job has no secret: derived from public facts, so it only keeps out
    peers that know neither the job's hosts nor its name.  Ranks stay authenticated (their keys come
    from a run key made per run); the entrypoint warns that worker messages are not.  `launch` never uses
    this: it has no workers, and makes a random worker key per run."""
    return hashlib.sha256(_LABEL_WORKERS + b"\0public\0" + ",".join(sorted(hosts)).encode()
                          + b"\0" + str(port).encode() + b"\0" + job.encode()).digest()


def new_run_key() -> bytes:
    return os.urandom(32)


def host_seed(run_key: bytes, job: str, host: str) -> bytes:
    """What the master sends ``host``'s worker: enough for that host's ranks' keys, no other host's."""
    return hmac.new(run_key, _LABEL_HOST + b"\0" + job.encode() + b"\0" + host.encode(), hashlib.sha256).digest()


def rank_key(seed: bytes, job: str, rank: int) -> bytes:
    return hmac.new(seed, _LABEL_RANK + b"\0" + job.encode() + b"\0" + str(rank).encode(), hashlib.sha256).digest()


def seal_seed(seed: bytes, worker_key: bytes, run_nonce: bytes, conn_nonce: bytes, host: str) -> bytes:
    """``seed`` XOR a pad that only holders of the workers' key can make, bound to this run, this connection
    and this host: what crosses the network instead of the seed (its own inverse: ``seal_seed`` opens it).
    One pad per (run, connection), and one seed per connection, so no pad is ever used twice."""
    pad = hmac.new(worker_key, _LABEL_SEAL + b"\0" + run_nonce + conn_nonce + b"\0" + host.encode(),
                   hashlib.sha256).digest()
    return bytes(a ^ b for a, b in zip(seed, pad))


def key_base() -> str:
    """Where key directories live on this host: in memory (/dev/shm) where there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"


def host_tag(host: str) -> str:
    """The host's part of a key directory's name (a hash: a host name may hold any character)."""
    return hashlib.sha256(host.encode()).hexdigest()[:16]


def _prefix(run_nonce_hex: str, host: str) -> str:
    return f"{KEY_DIR_PREFIX}{run_nonce_hex}-{host_tag(host)}-"


def is_private_dir(st: os.stat_result) -> bool:
    """An ``lstat`` result that is a directory of this process's uid with mode 0700 (no symlink, no other owner)."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


def write_key_dir(run_nonce_hex: str, host: str, seed: bytes, job: str, ranks, base: str | None = None) -> str:
    """Make ``host``'s key directory for this run, one 0600 file per rank of ``ranks``; returns its path.

    Raises:
        OSError: the directory cannot be made or written, or is not private once made.
    """
    base = base or key_base()
    sweep_stale(base)
    token = os.urandom(16).hex()
    staging = os.path.join(base, f"{_STAGING}{os.getpid()}-{token}")
    os.mkdir(staging, 0o700)                  # never exist_ok: a directory someone made first is refused
    try:
        if not is_private_dir(os.lstat(staging)):
            raise OSError(errno.EPERM, f"{staging} is not a 0700 directory of uid {os.geteuid()} once made")
        for r in ranks:
            fd = os.open(os.path.join(staging, f"rank-{r}.key"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, f"{rank_key(seed, job, r).hex()}\n{job}\n".encode())
            finally:
                os.close(fd)
        final = os.path.join(base, f"{_prefix(run_nonce_hex, host)}{os.getpid()}-{token}")
        os.rename(staging, final)             # the whole directory appears at once
    except BaseException:
        remove_key_dir(staging)
        raise
    return final


def remove_key_dir(directory: str | None) -> None:
    """Remove a key directory and the key files left in it (ranks that never started); never raises."""
    if not directory:
        return
    try:
        if not is_private_dir(os.lstat(directory)):
            return
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass
    try:
        os.rmdir(directory)
    except OSError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True       # EPERM: alive, another user's
    return True


def sweep_stale(base: str | None = None) -> list[str]:
    """Remove this uid's key directories whose writer is dead (a run killed before it cleaned up); returns them."""
    base = base or key_base()
    swept = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return swept
    for e in entries:
        name = e.name
        if name.startswith(_STAGING):
            pid_text = name[len(_STAGING):].split("-", 1)[0]
        elif name.startswith(KEY_DIR_PREFIX):
            parts = name[len(KEY_DIR_PREFIX):].split("-")
            pid_text = parts[2] if len(parts) == 4 else ""
        else:
            continue
        try:
            if not pid_text.isdigit() or _pid_alive(int(pid_text)) or not is_private_dir(os.lstat(e.path)):
                continue
        except OSError:
            continue
        remove_key_dir(e.path)
        swept.append(e.path)
    return swept


def _read_key_file(path: str) -> str | None:
    """The text of a key file that is a regular 0600 file of this uid; None when it is anything else.
    ``O_NONBLOCK``: a FIFO planted in its place opens at once (and is refused), never blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o600:
            return None
        data = os.read(fd, _MAX_KEY_FILE)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _own_dirs(base: str, run_nonce_hex: str, host: str) -> list[str]:
    prefix = _prefix(run_nonce_hex, host)
    out = []
    try:
        for e in os.scandir(base):
            if e.name.startswith(prefix):
                try:
                    if is_private_dir(os.lstat(e.path)):
                        out.append(e.path)
                except OSError:
                    pass
    except OSError:
        pass
    return out


def take_rank_key(run_nonce_hex: str, host: str, rank: int, deadline: Deadline, *, base: str | None = None,
                  clock: Clock = SYSTEM_CLOCK) -> tuple[bytes, str, str] | None:
    """(key, job, its directory) from this rank's key file, which is removed; None when no valid one appears
    before ``deadline`` (the rank then runs without reports, as it must when the channel is down).  Whatever
    is planted in its place (another user's directory, a symlink, a FIFO) is skipped, never waited on."""
    base = base or key_base()
    name = f"rank-{rank}.key"
    while True:
        for d in _own_dirs(base, run_nonce_hex, host):
            path = os.path.join(d, name)
            text = _read_key_file(path)
            if text is None:
                continue
            try:
                os.unlink(path)
            except OSError:
                pass
            key_hex, _, rest = text.partition("\n")
            try:
                key = bytes.fromhex(key_hex)
            except ValueError:
                return None
            return (key, rest.rstrip("\n"), d) if len(key) == 32 else None
        if deadline.expired():
            return None
        clock.sleep(min(_KEY_POLL_S, deadline.remaining()))


def wait_siblings(directory: str, deadline: Deadline, clock: Clock = SYSTEM_CLOCK) -> list[str]:
    """Wait until no key file is left in ``directory`` (every rank of this host took its own), so that no
    program starts while a sibling's key is still on disk; returns the files still there at ``deadline``."""
    while True:
        try:
            left = [n for n in os.listdir(directory) if n.startswith("rank-")]
        except OSError:
            return []
        if not left or deadline.expired():
            return left
        clock.sleep(min(_KEY_POLL_S, deadline.remaining()))
