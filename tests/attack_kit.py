"""Another user of the host, for the tests of issue #39: uid ``nobody`` running real processes (setpriv), and a
directory every user shares (a sticky, root-owned directory under /tmp, as /tmp itself), where that user can
make what it wants before the job's owner (root, the tests' uid) comes.

The attacker's programs run under the system's interpreter with the standard library only (the venv may live
under a directory closed to other users).
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
NOBODY_PY = "/usr/bin/python3"


def nobody_uid() -> int:
    return pwd.getpwnam("nobody").pw_uid


def needs_root() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access(NOBODY_PY, os.X_OK):
        pytest.skip("needs root and setpriv to act as another user")
    try:
        nobody_uid()
    except KeyError:
        pytest.skip("no user nobody")


def as_nobody(code: str, *args: str, timeout: float = 30) -> str:
    """Run ``code`` (Python, standard library) as uid nobody; its stdout.  It must succeed."""
    r = subprocess.run(NOBODY + [NOBODY_PY, "-c", code, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def shared():
    """A directory like /tmp (root's, 1777) that every user reaches: the place the attacker plants things."""
    needs_root()
    d = Path(tempfile.mkdtemp(prefix="mrk-shared-", dir="/tmp"))
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)
