"""exec/remote_host.py against another user of an ssh host (issue #39, item 5): uid nobody, a real process,
points the workdir at a directory of its own with a link before the job comes; the host side runs as root."""
from __future__ import annotations

import os
import subprocess
import sys

from attack_kit import as_nobody, nobody_uid, shared  # noqa: F401 - shared is a fixture

from mpirun_kit.exec import remote_host


def test_the_run_directory_is_never_made_through_another_users_link(shared):
    """Before, `write --private` made the run directory (makedirs) through the link, in the attacker's directory,
    and only then refused it: the attacker had a directory of root's to watch and fill.  Now nothing is made."""
    wd, theirs = shared / "mpirun-kit-job", shared / "theirs"
    as_nobody("import os, sys; os.mkdir(sys.argv[2], 0o777); os.symlink(sys.argv[2], sys.argv[1])", wd, theirs)
    r = subprocess.run(remote_host.argv(sys.executable, "write", str(wd / "r1" / "hostfile"), "--private",
                                        str(wd / "r1")), input=b"a slots=1\n", capture_output=True, timeout=30)
    assert (r.returncode, r.stderr.decode()) == (
        remote_host.UNSAFE_DIR,
        f"mpirun_kit: {wd} is a symbolic link belonging to uid {nobody_uid()} (nobody), not to you or root\n")
    assert os.listdir(theirs) == []
