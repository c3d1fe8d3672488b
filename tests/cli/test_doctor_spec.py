"""`doctor JOB.yaml` runs its all-reduce with the spec's processes_per_host (issue #28 item 6: it ran one rank
per host whatever the spec said, so a job's local path went unchecked)."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("flag, world", [((), 4), (("--ranks-per-host", "1"), 2)])
def test_doctor_of_a_spec_runs_its_processes_per_host(flag, world, tmp_path, cli):
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: doc\ntarget: {type: sim}\n"
                    "resources: {hosts: 2, processes_per_host: 2}\nprogram: {command: [\"true\"]}\n")
    r = cli("doctor", str(spec), "--dry-run", *flag)
    assert r.rc == 0, r.err
    ranks = [line for line in r.out.splitlines() if "mpirun_kit.workloads.allreduce" in line]
    assert len(ranks) == world and all(f"--world-size {world} " in line for line in ranks), r.out
