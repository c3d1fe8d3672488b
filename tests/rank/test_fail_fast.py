"""Fail fast (issue #40 item 2): a rank that ends failing while the others wait in MPI ends the whole job with its
code, at the defaults, within seconds; real mpirun, real ranks, `mpirun_kit launch` on this machine.

Before, a Python rank that called ``sys.exit(3)`` (or died of an exception) sat in ``MPI_Finalize``, run by mpi4py's
exit hook, waiting for ranks that waited for it: the job ran until the hang report (``stall_s`` = 600 s).  Each
job here has a 60-s deadline of the test's own (subprocess timeout), far below that; no timing is asserted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.mpi]

PY = sys.executable
BARRIER = ("from mpi4py import MPI; import sys, time\n"
           "comm = MPI.COMM_WORLD; comm.Barrier()\n"
           "if comm.rank == 1:\n"
           "    {act}\n"
           "comm.Barrier()\n")


def launch(tmp_path: Path, program: list[str], env: dict | None = None) -> tuple[int, dict, str, str]:
    r = subprocess.run([PY, "-m", "mpirun_kit.cli.main", "launch", "--hosts", "localhost:2", "--opt-ml",
                        str(tmp_path / "opt_ml"), "--", *program], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **(env or {})})
    result = json.loads((tmp_path / "opt_ml" / "output" / "result.json").read_text())
    return r.returncode, result, r.stderr, r.stdout


@pytest.mark.parametrize("act, code", [
    ("sys.exit(3)", 3),                          # the case: a code on the way into MPI_Finalize
    ("raise RuntimeError('boom')", 1),           # an exception: the traceback, then code 1
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137),   # death by a signal
])
def test_a_python_rank_failing_while_the_other_waits_ends_the_job_with_its_code(tmp_path, act, code):
    rc, result, err, _ = launch(tmp_path, [PY, "-c", BARRIER.format(act=act)])
    assert rc == code, err
    assert result["root_cause"]["rank"] == 1 and result["source"] == "job", result
    if code == 1:
        assert "RuntimeError: boom" in err


def test_a_rank_that_is_not_python_failing_ends_the_job(tmp_path):
    """A shell rank exits 3 while the Python rank waits in a barrier of its own (the shell never joins MPI)."""
    prog = ["/bin/sh", "-c", f'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; exec {PY} -c "'
                             'from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"']
    rc, result, err, _ = launch(tmp_path, prog)
    assert rc == 3, err
    assert result["root_cause"]["rank"] == 1, result


def test_a_clean_exit_of_every_rank_is_not_an_abort(tmp_path):
    """sys.exit(0) and a program's own sitecustomize are untouched (the hook runs the one it hides)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins; builtins.MINE = 'mine'\n")
    prog = [PY, "-c", "from mpi4py import MPI; import builtins, sys; MPI.COMM_WORLD.Barrier(); "
                      "print('SITE', builtins.MINE); sys.exit(0)"]
    rc, result, err, out = launch(tmp_path, prog, env={"PYTHONPATH": str(site)})   # forwarded: the allow-list
    assert rc == 0, err
    assert "[0 localhost] SITE mine" in out and "[1 localhost] SITE mine" in out, out
    assert "aborting the MPI job" not in err


def test_the_trainers_end_process_fails_fast_too(tmp_path):
    """maskrcnn/dist.py ``end_process`` ends a rank without interpreter finalisation (so without this hook's
    atexit path): a failing code there aborts the MPI job itself instead of waiting in MPI_Finalize."""
    prog = [PY, "-c", "from mpi4py import MPI\nfrom mpirun_kit.maskrcnn.dist import end_process\n"
                      "def main():\n    comm = MPI.COMM_WORLD; comm.Barrier()\n"
                      "    if comm.rank == 1:\n        return 3\n    comm.Barrier()\n"
                      "end_process(main)\n"]
    rc, result, err, _ = launch(tmp_path, prog)
    assert rc == 3, err
    assert result["root_cause"]["rank"] == 1, result


def test_the_master_stops_a_job_whose_launcher_lets_the_others_run_on(tmp_path):
    """The user turned Open MPI's own abort off: rank 1 exits 3, rank 0 would poll on for 120 s; the master, which
    has rank 1's exit report, stops the job (entrypoint/master.py FailFast), and the job ends with rank 1's code."""
    from mpirun_kit.spec.launch_spec import LaunchSpec

    spec = tmp_path / "spec.json"
    spec.write_text(LaunchSpec(program=(PY, str(Path(__file__).parents[1] / "bin" / "exit_with.py"), "3", "1"),
                               mca=(("orte_abort_on_non_zero_status", "0"),), mpi_flavour="openmpi4").to_json())
    r = subprocess.run([PY, "-m", "mpirun_kit.cli.main", "launch", "--hosts", "localhost:2", "--opt-ml",
                        str(tmp_path / "opt_ml"), "--spec", str(spec)], capture_output=True, text=True, timeout=60)
    result = json.loads((tmp_path / "opt_ml" / "output" / "result.json").read_text())
    assert r.returncode == 3, r.stderr
    assert (result["cause"], result["root_cause"]["rank"]) == ("rank_failed", 1), result
