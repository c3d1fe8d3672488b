"""The suite's own check that no test writes into the user's job record store (tests/conftest.py
``users_record_store_untouched``; issue #40 item 7): run on a test that does, it fails the run, naming the file."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

ESCAPING = '''
import os
from pathlib import Path

from mpirun_kit.records.store import RecordStore

def test_records_a_job_in_the_default_store(tmp_path):
    store = RecordStore(Path(os.environ["XDG_STATE_HOME"]) / "mpirun_kit")
    store.create("escaped", "local", spec=str(tmp_path / "x.yaml"), runs_root=tmp_path)
'''


def test_a_test_that_writes_into_the_default_store_fails_the_run(tmp_path):
    (tmp_path / "test_escaping.py").write_text(ESCAPING)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(TESTS)}
    env.pop("MPIRUN_KIT_STATE_DIR", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), str(tmp_path / "test_escaping.py")],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode != 0, r.stdout
    assert "the test suite wrote job records into the user's store" in r.stdout and "['escaped-" in r.stdout, r.stdout


def test_the_default_store_is_the_users_not_a_tests():
    """Inside a test the store is the test's own (job_records); the session check watches the user's default."""
    assert os.environ["MPIRUN_KIT_STATE_DIR"] != str(Path.home() / ".local" / "state" / "mpirun_kit")
