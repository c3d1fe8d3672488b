"""dist.py: rank/world/local rank and rendezvous from each launcher's variables (pure), and how a rank's
process ends (end_process: real subprocesses and, for MPI_Finalize, a real mpirun)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from mpirun_kit.errors import LaunchError, SpecError
from mpirun_kit.maskrcnn.dist import DistInfo, Comm, read_dist_env, resolve_rendezvous


def test_single_process_without_launcher():
    assert read_dist_env({"PATH": "/bin"}) == DistInfo()


def test_open_mpi():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "MASTER_ADDR": "algo-1", "MASTER_PORT": "29500",
           "RANK": "99", "WORLD_SIZE": "99"}  # Open MPI's own variables win over stale torch ones
    assert read_dist_env(env) == DistInfo(5, 16, 1, 8, "algo-1", 29500, "openmpi")


def test_mpich_pmi_with_launcher_provided_address():
    env = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2",
           "MPIRUN_KIT_MASTER_ADDR": "10.0.0.7:23456"}
    assert read_dist_env(env) == DistInfo(2, 4, 0, 2, "10.0.0.7", 23456, "pmi")


def test_torchrun():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"}
    assert read_dist_env(env) == DistInfo(3, 4, 1, 2, "127.0.0.1", 1234, "torchrun")


def test_open_mpi_without_address_has_none_until_rendezvous():
    info = read_dist_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"})
    assert (info.master_addr, info.master_port, info.distributed, info.is_main) == (None, None, False, True)
    assert resolve_rendezvous(info) is info  # a world of one needs no rendezvous


def test_bad_values_name_the_variable():
    with pytest.raises(SpecError, match=r"environment variable OMPI_COMM_WORLD_RANK='x': expected an integer"):
        read_dist_env({"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"})
    with pytest.raises(SpecError, match=r"rank 4 is outside world size 2 \(torchrun variables\)"):
        read_dist_env({"RANK": "4", "WORLD_SIZE": "2"})


def test_torchrun_without_address_is_a_launch_error():
    info = read_dist_env({"RANK": "1", "WORLD_SIZE": "2"})
    with pytest.raises(LaunchError, match="rank 1 of 2 \\(torchrun\\) has no rendezvous address; expected MASTER_ADDR"):
        resolve_rendezvous(info)


def test_single_comm_is_identity():
    import torch

    c = Comm("none", 0, 1)
    t = torch.tensor([1.0, 2.0])
    assert torch.equal(c.allreduce_sum(t), t) and c.gather_object({"a": 1}) == [{"a": 1}]
    assert c.broadcast_object(5) == 5


# --- how a rank's process ends (dist.end_process) -------------------------------------------------
# CI at 3e4fa64: rank 1 of the SIGTERM test aborted (134, not 143) in ProcessGroupGloo's worker
# thread, which dropped a tensor's Python object while the interpreter was finalizing
# (pytorch/pytorch#190489).  A 2-rank gloo script (DDP, gather_object, destroy_process_group,
# sys.exit(143)), 3 pairs at a time on this machine: 1 rank of 90 aborted.  The remedy under test:
# the rank never reaches interpreter finalization.

_LATE = ("import os, sys\n"
         "class Late:\n"
         "    def __del__(self, _w=os.write):\n"
         "        _w(1, b'interpreter finalized\\n')\n"
         "late = Late()\n")


def _python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_end_process_exits_with_mains_code_after_exit_handlers_and_without_finalization():
    out = _python(_LATE + "import atexit\n"
                  "from mpirun_kit.maskrcnn.dist import end_process\n"
                  "atexit.register(lambda: print('exit handler ran'))\n"
                  "def main():\n"
                  "    print('unflushed', end='')\n"
                  "    return 143\n"
                  "end_process(main)\n")
    assert out.returncode == 143, out
    assert out.stdout.startswith("unflushed") and "exit handler ran" in out.stdout, out
    assert "interpreter finalized" not in out.stdout, out


@pytest.mark.parametrize("body, code, text", [
    ("raise SystemExit(64)", 64, ""),
    ("raise SystemExit('maskrcnn.train: error: bad')", 1, "maskrcnn.train: error: bad"),
    ("return None", 0, ""),
    ("raise RuntimeError('boom')", 1, "RuntimeError: boom"),
])
def test_end_process_turns_what_main_raises_into_the_exit_code(body, code, text):
    out = _python("from mpirun_kit.maskrcnn.dist import end_process\n"
                  f"def main():\n    {body}\n"
                  "end_process(main)\n")
    assert out.returncode == code, out
    assert text in out.stderr, out


def test_training_entry_ends_through_end_process():
    # before: `sys.exit(main())`, and the interpreter finalized ("interpreter finalized" printed)
    out = _python(_LATE + "import runpy\n"
                  "sys.argv = ['train', '--config', 'demo', '--data-dir', 'd', '--output-dir', 'o', '--print-config']\n"
                  "runpy.run_module('mpirun_kit.maskrcnn.train', run_name='__main__')\n")
    assert out.returncode == 0, out
    assert "solver:" in out.stdout and "interpreter finalized" not in out.stdout, out


@pytest.mark.mpi
def test_end_process_finalizes_mpi_so_mpirun_sees_a_clean_exit(tmp_path):
    # mpi4py calls MPI_Finalize during interpreter finalization, which end_process skips; without
    # its own Finalize, mpirun reports the ranks "exited improperly" and fails the job
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.fail("mpirun not found: install openmpi-bin (bash ops/quickstart.sh setup)")
    script = tmp_path / "rank.py"
    script.write_text("from mpi4py import MPI\n"
                      "from mpirun_kit.maskrcnn.dist import end_process\n"
                      "MPI.COMM_WORLD.Barrier()\n"
                      "end_process(lambda: 0)\n")
    out = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, str(script)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out
    assert "improperly" not in out.stdout + out.stderr, out
