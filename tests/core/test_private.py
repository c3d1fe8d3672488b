"""core/private.py against another user of the host (issue #39): uid nobody plants directories, links, FIFOs and
files of its own with real processes; the owner (root, the tests' uid) makes and reads its private directory."""
from __future__ import annotations

import os
import stat

import pytest
from attack_kit import as_nobody, nobody_uid, shared  # noqa: F401 - shared is a fixture

from mpirun_kit.core.private import make_private_dir, open_private, read_private, write_private
from mpirun_kit.errors import SpecError

MKDIR_0777 = "import os, sys; os.makedirs(sys.argv[1]); os.chmod(sys.argv[1], 0o777)"


def test_a_directory_another_user_made_first_is_refused_and_nothing_is_made_in_it(shared):
    runs = shared / "runs" / "hello"
    as_nobody(MKDIR_0777, runs)   # the attacker's, 0777: it could rename whatever root makes in it
    with pytest.raises(SpecError) as e:
        make_private_dir(runs / "hello-abc123")
    assert str(e.value) == (f"{runs / 'hello-abc123'}: the run directory is refused: {runs} belongs to uid "
                            f"{nobody_uid()} (nobody), not to you or root, so another user could swap its files; use "
                            "a directory of your own that only you can write (chmod 700), under directories only you "
                            "or root can write")
    assert os.listdir(runs) == []


def test_nothing_is_made_through_another_users_link(shared):
    """The attacker's link where a parent of the run directory goes: refused before anything is made below it
    (the ssh host's run directory was made through it, then refused)."""
    as_nobody("import os, sys; os.mkdir(sys.argv[2], 0o777); os.symlink(sys.argv[2], sys.argv[1])",
              shared / "wd", shared / "theirs")
    with pytest.raises(SpecError, match=f"{shared / 'wd'} is a symbolic link belonging to uid {nobody_uid()} "
                                        r"\(nobody\), not to you or root"):
        make_private_dir(shared / "wd" / "r1", own=2)
    assert os.listdir(shared / "theirs") == []


def test_a_private_directory_is_0700_under_a_sticky_shared_one(shared):
    d = make_private_dir(shared / "mine" / "r1")
    assert [stat.S_IMODE(os.lstat(p).st_mode) for p in (d.parent, d)] == [0o700, 0o700]
    write_private(d / "result.json", "{}")
    assert stat.S_IMODE(os.lstat(d / "result.json").st_mode) == 0o600
    assert read_private(d / "result.json", "job's result") == b"{}"


@pytest.mark.parametrize("plant", ["symlink", "fifo", "file"])
def test_a_planted_link_fifo_or_file_is_never_read(shared, plant):
    """What another user can put where a job's file is expected: a link to a file only root may read, a FIFO
    (an open would block), a file of its own.  Each refused on its own words, nothing read, nothing blocks."""
    secret = shared / "root-only"
    secret.write_text("root's secret\n")
    os.chmod(secret, 0o600)
    code = {"symlink": "import os, sys; os.symlink(sys.argv[2], sys.argv[1])",
            "fifo": "import os, sys; os.mkfifo(sys.argv[1], 0o666)",
            "file": "import sys; open(sys.argv[1], 'w').write('forged')"}[plant]
    as_nobody(code, shared / "output.log", secret)
    why = {"symlink": f"is a symbolic link of uid {nobody_uid()} \\(nobody\\), which mpirun_kit never follows",
           "fifo": "is not a regular file", "file": f"is refused: it belongs to uid {nobody_uid()} \\(nobody\\)"}[plant]
    with pytest.raises(SpecError, match=f"{shared / 'output.log'}: the job's output {why}"):
        read_private(shared / "output.log", "job's output")


def test_create_never_opens_what_is_there(shared):
    as_nobody("import os, sys; os.symlink('/etc/passwd', sys.argv[1])", shared / "submit.log")
    with pytest.raises(FileExistsError):
        open_private(shared / "submit.log", "supervisor's log", create=True)
