"""Plan input from files no one else can write: the check every file the entrypoint plans from passes.

Place in the data flow: discovery (discover.py, sagemaker.py's ``read_json``) and the entrypoint
(entrypoint/main.py's ``--spec``, entrypoint/common.py's job secret) read their files through
``read_plan_input``; `mpirun_kit launch` makes its ``--opt-ml`` with ``private_dir``.  A plan built from a
file another user wrote runs that user's choices as whoever runs the job (an ``LD_PRELOAD``, an
``--mca plm_rsh_agent``): so a file is read only when it, and every directory above it, is owned by this
user or root and writable by no one else (a directory with the sticky bit, like /tmp, may be shared: no one
can replace another's entry in it).  The file is checked on the descriptor it is read from, so a swap
between the check and the read is caught.
"""
from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from ..errors import SpecError


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _why_untrusted(st: os.stat_result, is_dir: bool) -> str:
    """Why a file or directory with this stat may not feed a plan; "" when it may."""
    me = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (me, 0):
        return f"owned by {_owner(st.st_uid)}, mode {mode:04o}"
    if mode & 0o022 and not (is_dir and mode & stat.S_ISVTX):
        return f"writable by {'group and others' if mode & 0o022 == 0o022 else 'group' if mode & 0o020 else 'others'} " \
               f"(owner {_owner(st.st_uid)}, mode {mode:04o})"
    return ""


def _refuse(path: Path, what: str, target: Path, why: str, is_dir: bool) -> SpecError:
    fix = (f"chown {os.geteuid()} {target} && chmod go-w {target}" if not is_dir or why.startswith("writable")
           else f"use a directory of your own")
    return SpecError(
        f"{path}: {what} not read: {'its directory ' + str(target) if target != path else 'the file'} is {why}; "
        f"mpirun_kit plans only from files that you (uid {os.geteuid()}) or root own and no one else can write, "
        f"in directories no one else can write: remove it and write it again yourself, or {fix}")


def _refuse_links(path: Path, what: str) -> Path:
    """A symbolic link on the way to ``path`` (``path`` itself included) is read as its owner points it: only this
    user's or root's are followed (os.stat sees through them).  Returns the absolute path.

    Raises:
        SpecError: one is another user's.
    """
    full = Path(os.path.abspath(path))
    for d in (full, *full.parents):
        try:
            st = os.lstat(d)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (os.geteuid(), 0):
            raise _refuse(Path(path), what, d, f"a symbolic link of {_owner(st.st_uid)}", True)
    return full


def check_ancestors(path: Path, what: str) -> None:
    """Every directory above ``path`` must be this user's or root's and writable by no one else (sticky ok), and
    every symbolic link on the way to it (``path`` itself included) this user's or root's.

    Raises:
        SpecError: one is not; the message names it, its owner and mode, and the remedy.
    """
    full = _refuse_links(path, what)
    for d in (*full.parents, *Path(os.path.realpath(path)).parents):
        try:
            st = os.stat(d)
        except OSError:
            continue
        why = _why_untrusted(st, True)
        if why:
            raise _refuse(Path(path), what, d, why, True)


def read_plan_input(path: Path, what: str) -> str:
    """The text of ``path`` once it and its directories pass the check (module docstring).

    Raises:
        OSError: it cannot be opened; UnicodeDecodeError: it is not UTF-8 text (the caller words both).
        SpecError: another user could have written it.
    """
    path = Path(path)
    _refuse_links(path, what)   # before the open: a link of another user's is never followed
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"{path}: {what} is not a regular file; pass a file")
        why = _why_untrusted(st, False)
        if why:
            raise _refuse(path, what, path, why, False)
        check_ancestors(path, what)
        data = f.read()
    return data.decode()


def private_dir(path: Path, what: str) -> Path:
    """``path`` as a directory only this user can use: made 0700 when missing; when it exists, it must be this
    user's, a real directory (no symlink), with no access for group or others.

    Raises:
        SpecError: it exists with another owner or wider modes, or is not a directory; the message names the
            path, its owner and mode, and the remedy.
    """
    path = Path(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SpecError(f"{path}: cannot make the {what} ({exc.strerror}); pass --opt-ml DIR, a directory of "
                        "your own") from exc
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        raise SpecError(f"{path}: the {what} is not a directory (a {'symlink' if stat.S_ISLNK(st.st_mode) else 'file'}, "
                        f"owned by {_owner(st.st_uid)}); remove it, or pass --opt-ml DIR, a directory of your own")
    if st.st_uid != os.geteuid() or mode & 0o077:
        raise SpecError(f"{path}: the {what} is owned by {_owner(st.st_uid)} with mode {mode:04o}; it must be yours "
                        f"(uid {os.geteuid()}) with mode 0700, since launch reads its plan from it: remove it "
                        f"(it may hold another user's files), or pass --opt-ml DIR, a directory of your own")
    check_ancestors(path, f"the {what}")
    return path
