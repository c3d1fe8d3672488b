"""Daemon detection with real processes: /bin/sleep run through a symlink named like an MPI daemon."""
import os
import signal
import subprocess

import pytest

from mpirun_kit.exec.daemon import alive, find_daemons, signal_pids

pytestmark = pytest.mark.timeout(60)


def test_find_follow_and_stop(tmp_path):
    fake = tmp_path / "prted"   # a name no other test or MPI on this machine uses
    os.symlink("/bin/sleep", fake)
    assert find_daemons(["prted"]) == ()
    p = subprocess.Popen([str(fake), "30"])
    try:
        found = ()
        for _ in range(100):
            found = find_daemons(["prted"])
            if found:
                break
        assert found == (p.pid,)
        assert alive(found) == (p.pid,)
        signal_pids(found, signal.SIGTERM)
        p.wait(10)
        assert alive(found) == ()
    finally:
        p.kill()
        p.wait()
