"""The environment users expect (issue #40 item 4): `local` ranks get the submitting shell's environment, as
torchrun's do, less secrets (named, with how to send them); `$${` is a literal `${` in a spec's strings.

End to end: `mpirun_kit submit` / `plan` as a user runs them, real mpirun and ranks on this machine.  Before,
MYVAR, WANDB_PROJECT and CUDA_HOME never reached a local rank and nothing said so, and `${MYVAR}` in a command
was refused as an unknown reference with no escape.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text

SHELL = {"MYVAR": "mine", "WANDB_PROJECT": "proj", "CUDA_HOME": "/opt/cuda", "WANDB_API_KEY": "s3cret-k3y"}


def spec(d: Path) -> Path:
    p = d / "envjob.yaml"
    p.write_text(textwrap.dedent("""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: envjob
        resources: {processes_per_host: 1}
        program: {command: [sh, -c, 'echo "seen MYVAR=$${MYVAR} WANDB_PROJECT=$WANDB_PROJECT CUDA_HOME=$CUDA_HOME key=$${WANDB_API_KEY:-unset}"']}
        """))
    return p


def mrk(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, **SHELL})


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_local_ranks_get_the_shells_environment_and_secrets_are_named(tmp_path):
    r = mrk("submit", str(spec(tmp_path)), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "seen MYVAR=mine WANDB_PROJECT=proj CUDA_HOME=/opt/cuda key=unset" in r.stdout, r.stdout
    assert "s3cret" not in r.stdout + r.stderr
    assert "env: not forwarded to the ranks: " in r.stderr and "WANDB_API_KEY" in r.stderr, r.stderr
    assert "name it in env_forward (or set it in env) to send it" in r.stderr, r.stderr


def test_plan_lists_inherited_and_dropped_variables(tmp_path):
    r = mrk("plan", str(spec(tmp_path)), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "MYVAR=mine    [inherited (target local)]" in r.stdout, r.stdout
    assert ("dropped WANDB_API_KEY: secret-looking name: not forwarded unless named; name it in env_forward (or set "
            "it in env) to send it (shown as ***)") in r.stdout, r.stdout


def test_a_doubled_dollar_is_a_literal_dollar_brace():
    job = load_job_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: x\n"
                        "program: {command: [sh, -c, 'echo $${HOME} ${output}']}\n", "x.yaml")
    argv = compile_job(job).launch.program
    assert argv[-1] == "echo ${HOME} ./runs/x", argv      # the escape kept, the reference resolved


@pytest.mark.mpi
@pytest.mark.sim
@pytest.mark.timeout(180)
def test_a_sim_rank_on_another_host_gets_the_allow_list_and_the_rest_is_named(tmp_path):
    """Multi-host (issue #40 item 4): the simulated hosts start from a minimal environment, as a remote host's
    login does, and the submitting shell's WANDB_PROJECT and CUDA_HOME never reached a rank on algo-2.  Now the
    allow-listed variables travel in the launch spec; MYVAR (not on the list) and WANDB_API_KEY (secret-looking)
    stay behind, each named with how to send it."""
    p = tmp_path / "envsim.yaml"
    p.write_text(textwrap.dedent("""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: envsim
        target: {type: sim}
        resources: {hosts: 2, processes_per_host: 1}
        program: {command: [sh, -c, 'echo "on $(hostname) WANDB_PROJECT=$WANDB_PROJECT CUDA_HOME=$CUDA_HOME MYVAR=$${MYVAR:-unset} key=$${WANDB_API_KEY:-unset}"']}
        """))
    r = mrk("submit", str(p), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "on algo-2 WANDB_PROJECT=proj CUDA_HOME=/opt/cuda MYVAR=unset key=unset" in r.stdout, r.stdout
    assert "s3cret" not in r.stdout + r.stderr
    assert "WANDB_API_KEY not forwarded to the ranks: secret-looking name" in r.stderr, r.stderr
    left = next(ln for ln in r.stderr.splitlines() if "not forwarded from this shell" in ln)
    assert " MYVAR " in left and left.endswith("name it in env_forward (or set it in env) to send one"), left
