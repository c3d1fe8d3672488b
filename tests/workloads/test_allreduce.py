"""The allreduce workload's pure parts (mpirun_kit/workloads/allreduce.py); its runs are in
tests/doctor (the smoke test on the simulated cluster) and benchmarks/bench_allreduce.py."""
from __future__ import annotations

import pytest

from mpirun_kit.workloads.allreduce import bus_bandwidth, parse_result, parse_size, worker_argv


def test_sizes():
    assert [parse_size(s) for s in ("64K", "1M", "1.5k", "100")] == [65536, 1048576, 1536, 100]
    with pytest.raises(SystemExit, match=r"allreduce: size 'lots' is not a size; expected bytes like 65536, 64K or 1M"):
        parse_size("lots")


def test_bus_bandwidth_is_the_nccl_tests_formula():
    assert bus_bandwidth(10**9, 1.0, 4) == (1.0, 1.5)
    assert bus_bandwidth(8_000_000_000, 1.0, 4) == (8.0, 12.0)
    assert bus_bandwidth(1, 0.0, 4) == (0.0, 0.0)


def test_smoke_argv_and_result():
    argv = worker_argv("/py", rank=1, world_size=2, local_rank=0, master="algo-1", port=29499, nbytes=1024,
                       iters=5, timeout_s=60.0)
    assert argv == ["/py", "-m", "mpirun_kit.workloads.allreduce", "--rank", "1", "--world-size", "2",
                    "--local-rank", "0", "--master", "algo-1", "--port", "29499", "--bytes", "1024",
                    "--iters", "5", "--timeout", "60"]
    assert parse_result('noise\nMPIRUN_KIT_ALLREDUCE {"bytes": 4, "seconds": 0.5}\n') == {"bytes": 4, "seconds": 0.5}
    assert parse_result("MPIRUN_KIT_ALLREDUCE {not json") is None


def test_smoke_needs_its_rendezvous(capsys):
    from mpirun_kit.workloads.allreduce import main

    with pytest.raises(SystemExit):
        main(["--rank", "0"])
    assert "--rank needs --world-size, --master and --port" in capsys.readouterr().err
