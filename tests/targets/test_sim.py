"""`submit --target sim` of jobs/allreduce-bench.yaml: 3 simulated hosts x 2 ranks, result checked.

Real processes end to end: the simulated cluster (namespaces, sshd per host), the
per-host entrypoint on every host, mpirun across hosts, torch.distributed (gloo).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpirun_kit.cli.main import main

pytestmark = pytest.mark.sim
REPO = Path(__file__).resolve().parents[2]


def test_allreduce_bench_on_three_simulated_hosts(tmp_path, capfd):
    spec = tmp_path / "allreduce.yaml"
    # The repo's job, with the cluster state under tmp_path so nothing is left behind.
    spec.write_text((REPO / "jobs" / "allreduce-bench.yaml").read_text().replace(
        "target:\n  type: sim\n", f"target:\n  type: sim\n  sim: {{root: {tmp_path / 'sim'}}}\n"))
    assert main(["submit", str(spec), "--target", "sim"]) == 0
    captured = capfd.readouterr()
    out = captured.out
    assert "[0 algo-1] allreduce check ok world=6 expected=21.0" in out
    sizes = re.findall(r"allreduce backend=gloo world=6 hosts=3 bytes=(\d+) .* busbw_GBps=([0-9.]+)", out)
    assert [int(s) for s, _ in sizes] == [65536, 1048576, 8388608]
    assert all(float(bw) > 0 for _, bw in sizes)
    assert "sim: every host finished (algo-1=0, algo-2=0, algo-3=0)" in captured.err
    assert "[algo-2 entrypoint] mpirun_kit: worker algo-2: job result from master: exit code 0" in out


def sim_job(tmp_path: Path, hosts: int, ppn: int, command: str, root: Path | None = None) -> Path:
    """A sim-target job running ``command`` (a YAML flow sequence), cluster state under ``root``."""
    spec = tmp_path / "job.yaml"
    spec.write_text(f"""\
apiVersion: mpirun_kit/v1
kind: Job
name: h5-sim-job
target: {{type: sim, sim: {{root: {root or tmp_path / 'sim'}}}}}
resources: {{hosts: {hosts}, processes_per_host: {ppn}}}
program:
  command: {command}
""")
    return spec


def test_failing_rank_exit_code_comes_back_from_the_sim(tmp_path, capfd):
    spec = sim_job(tmp_path, 2, 1, """[sh, -c, 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exit 7; fi; sleep 1']""")
    assert main(["submit", str(spec)]) == 7
    err = capfd.readouterr().err
    assert "sim: every host finished (algo-1=7, algo-2=7)" in err


def test_rank_output_is_byte_for_byte_on_the_sim(tmp_path, capfdbinary):
    """Issue 16 defect 1 on the sim target: mpirun's tags off exactly, then the host log copied unchanged."""
    from . import exact_output

    (tmp_path / "exact.py").write_text(exact_output.PROGRAM)
    assert main(["submit", str(sim_job(tmp_path, 2, 2, f"[python3, {tmp_path / 'exact.py'}]"))]) == 0
    out = capfdbinary.readouterr().out
    # The host's log holds stdout and stderr together.
    exact_output.assert_exact(out, out, {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"})
