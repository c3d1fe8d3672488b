"""Private directories and the files in them: what another user of the host can neither swap, read nor plant.

Place in the data flow: one home for the rule every job directory follows.  records/store.py makes each
job's run directory and the state directory with ``make_private_dir``; exec/remote_host.py makes an ssh
host's run directory the same way (``swappable`` is its check); the job service writes and reads the run
directory's files with ``open_private``/``read_private``/``write_private``, and so do ``logs`` and the
result reader.

The rule: a directory is private when it is this user's, writable by no one else, and every directory above
it is this user's or root's and not writable by group or others unless sticky (/tmp: no one can rename
another's entry in it); a symbolic link on the way must be this user's or root's, and where it leads passes
the same check.  Anyone who could rename an entry on the way could swap the job's files (a ``request.json``
that a detached supervisor runs as this user, a ``output.log`` that is a link to a file of this user's).
A file in it is opened without following a link (``O_NOFOLLOW``), created only where nothing is
(``O_EXCL``), and accepted only as a regular file of this user's that no one else can write.
Standard library only (core/).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import SpecError


def owner(uid: int) -> str:
    """``uid 0 (root)``: a uid with its name where the system knows one."""
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def swappable(path: str | os.PathLike, uid: int | None = None, own: int = 1) -> str | None:
    """Why another user could swap the entries of directory ``path``, or None (module docstring's rule).

    ``own``: how many directories, from ``path`` up, must be ``uid``'s (default: our effective uid) and not
    writable by others even with the sticky bit; those above need only be ``uid``'s or root's.  The ssh
    target asks 2 (the run directory and its workdir); a local run directory 1.
    """
    me = os.geteuid() if uid is None else uid

    def problem(p: Path, st: os.stat_result, mine: bool) -> str | None:
        if stat.S_ISLNK(st.st_mode):
            return (None if st.st_uid in (me, 0)
                    else f"{p} is a symbolic link belonging to {owner(st.st_uid)}, not to you or root")
        if st.st_uid != me and (mine or st.st_uid != 0):
            return f"{p} belongs to {owner(st.st_uid)}, not to you" + ("" if mine else " or root")
        if st.st_mode & 0o022 and (mine or not st.st_mode & stat.S_ISVTX):
            return f"{p} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
        return None

    for top in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        for i, d in enumerate((top, *top.parents)):
            try:
                st = os.lstat(d)
            except FileNotFoundError:
                if i == 0:
                    continue
                raise
            why = problem(d, st, mine=i < own)
            if why:
                return why
    return None


def make_private(path: str | os.PathLike, *, own: int = 1, exist_ok: bool = False) -> str | None:
    """Make ``path`` (0700, missing parents too) and check it private: why another user could swap it (one
    phrase naming the directory and its owner or mode), or None.  The directories that exist are checked
    before anything is made below them, so nothing is ever made through another user's link.

    ``exist_ok``: an existing ``path`` is used when it passes (else FileExistsError, as os.mkdir).

    Raises:
        FileExistsError: it exists and ``exist_ok`` is false;  OSError: it cannot be made.
    """
    path = Path(os.path.abspath(path))
    missing: list[Path] = []
    top = path
    while not os.path.lexists(top):
        missing.append(top)
        top = top.parent
    if not missing and not exist_ok:
        raise FileExistsError(17, "File exists", str(path))
    why = swappable(top, own=max(0, own - len(missing)))
    if why:
        return why
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if d == path and not exist_ok:
                raise
            # someone made it between our look and our mkdir: the check below says whose it is
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        return f"{path} is not a directory but a file of {owner(st.st_uid)}"
    return swappable(path, own=own)


def make_private_dir(path: str | os.PathLike, what: str = "run directory", *, own: int = 1,
                     exist_ok: bool = False) -> Path:
    """``make_private``, refusing with an error: the directory, made or checked.

    Raises:
        SpecError: it, or a directory above it, could be swapped by another user: one line naming the
            directory, its owner or mode, and the remedy;
        FileExistsError, OSError: as ``make_private``.
    """
    why = make_private(path, own=own, exist_ok=exist_ok)
    if why:
        raise SpecError(f"{path}: the {what} is refused: {why}, so another user could swap its files; use a "
                        "directory of your own that only you can write (chmod 700), under directories only you "
                        "or root can write")
    return Path(os.path.abspath(path))


def _check_file(path: Path, st: os.stat_result, what: str) -> None:
    me = os.geteuid()
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"{path}: the {what} is not a regular file; remove it (another user may have put it there)")
    if st.st_uid != me or st.st_mode & 0o022 or st.st_nlink != 1:
        raise SpecError(f"{path}: the {what} is refused: it belongs to {owner(st.st_uid)}, mode "
                        f"{stat.S_IMODE(st.st_mode):04o}, {st.st_nlink} link(s); mpirun_kit reads and writes only "
                        f"files of yours (uid {me}) that no one else can write: remove it")


def open_private(path: str | os.PathLike, what: str, *, write: bool = False, create: bool = False) -> int:
    """A descriptor on ``path`` opened without following a link, once it proves to be a regular file of this
    user's that no one else can write (checked on the descriptor).  ``write``: for appending; ``create``:
    made 0600 where nothing is (O_EXCL: never an existing file or link).

    Raises:
        FileNotFoundError: there is no ``path`` (and ``create`` is false);
        SpecError: it is a link, not a regular file, or not this user's (the message names it and its owner);
        FileExistsError: ``create`` and something is there already.
    """
    path = Path(path)
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    flags |= (os.O_WRONLY | os.O_APPEND) if write or create else os.O_RDONLY
    if create:
        flags |= os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == 40:   # ELOOP: the last component is a symbolic link, which O_NOFOLLOW refuses
            st = os.lstat(path)
            raise SpecError(f"{path}: the {what} is a symbolic link of {owner(st.st_uid)}, which mpirun_kit never "
                            "follows: remove it") from None
        raise
    try:
        _check_file(path, os.fstat(fd), what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(path: str | os.PathLike, what: str, limit: int | None = None) -> bytes:
    """The bytes of ``path`` (at most ``limit``) through ``open_private``; its errors."""
    with os.fdopen(open_private(path, what), "rb") as f:
        return f.read() if limit is None else f.read(limit)


def write_private(path: str | os.PathLike, data: str | bytes) -> Path:
    """``data`` to ``path`` atomically, 0600 (core/files.write_atomic: a fresh temporary file renamed over the
    name, so a link there is replaced, never followed)."""
    from .files import write_atomic

    return write_atomic(path, data, mode=0o600)
