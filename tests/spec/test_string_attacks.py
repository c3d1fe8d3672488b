"""Spec strings that cannot break out of the argv or script they reach (issue #39, items 4 and 5).

Whoever writes a spec, or a stack output a spec names, is the attacker here: `mpirun_kit` runs as a user runs
it (a fresh interpreter).  On the tree before: a newline in an #SBATCH value became a shell line of the batch
script, a job name with a trailing newline passed, a NUL in an env value ended in "internal error ... embedded
null byte" (70) and a 200 KB env value in "Argument list too long" (70).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.mpi


def mrk(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", *argv], capture_output=True, text=True,
                          timeout=120)


def spec(tmp_path, extra: str, name: str = "strings") -> str:
    p = tmp_path / "job.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: {name}
        resources: {{processes_per_host: 1}}
        program: {{command: [python3, -c, "import os\\nprint(len(os.environ.get('A', '')))"]}}
        """) + textwrap.dedent(extra))
    return str(p)


ONE_LINE = ("must be text without control characters: a NUL cannot reach a program, and a line break or other "
            "control character could start a new line of the script or command it goes into")


def test_a_newline_in_an_sbatch_value_is_a_located_spec_error(tmp_path):
    f = spec(tmp_path, """\
        target:
          type: slurm
          slurm:
            partition: "debug\\ntouch /tmp/owned #"
            sbatch_options: ["--constraint=a100\\nrm -rf ~ #"]
        """)
    r = mrk("submit", f, "--dry-run")
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert "touch /tmp/owned" not in r.stdout
    assert f"{f}:9: target.slurm.partition: holds a newline (\\n) at character 6; this value {ONE_LINE}" in r.stderr
    assert f"{f}:10: target.slurm.sbatch_options[0]: holds a newline (\\n) at character 18" in r.stderr, r.stderr


def test_a_stack_output_cannot_carry_a_newline_into_the_script(tmp_path):
    f = spec(tmp_path, """\
        target: {type: slurm, slurm: {partition: "${stack:infra.Partition}"}}
        """)
    r = mrk("submit", f, "--dry-run", "--stack-output", "infra.Partition=debug\ntouch /tmp/owned #")
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert "touch /tmp/owned" not in r.stdout
    assert "with its ${stack:...} outputs put in, target.slurm.partition: holds a newline (\\n) at character 6" \
        in r.stderr, r.stderr


def test_a_job_name_with_a_trailing_newline_is_refused(tmp_path):
    f = spec(tmp_path, "", name='"hello\\n"')
    r = mrk("validate", f)
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert f"{f}:3: name: holds a newline (\\n) at character 6; this value {ONE_LINE}" in r.stdout, r.stdout


def test_a_nul_in_an_env_value_is_a_located_spec_error_not_an_internal_one(tmp_path):
    f = spec(tmp_path, 'env: {A: "a\\0b"}\n')
    r = mrk("submit", f)
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert "internal error" not in r.stderr
    assert f"{f}:6: env.A: holds a NUL character (\\0) at character 2; this value {ONE_LINE}" in r.stderr, r.stderr


def test_an_env_value_over_the_kernels_limit_names_its_size_and_the_limit(tmp_path):
    f = spec(tmp_path, f'env: {{A: "{"x" * 200_000}"}}\n')
    r = mrk("submit", f)
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert (f"{f}:6: env.A: is 200003 bytes as NAME=VALUE (with its NUL); the kernel passes at most 131072 bytes "
            "per argument or environment string (MAX_ARG_STRLEN)") in r.stderr, r.stderr


def test_a_multi_line_env_value_and_program_still_run(tmp_path):
    f = spec(tmp_path, 'env: {A: "line 1\\nline 2"}\n')
    r = mrk("submit", f)
    assert r.returncode == 0, r.stderr
    assert "] 13" in r.stdout, r.stdout
