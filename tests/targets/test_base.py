"""targets/base.py's DryRun: the one printer of every target's request, with its redaction hook and warnings."""
from __future__ import annotations

import json

from mpirun_kit.targets.base import DryRun


def test_render_and_json_show_the_request_through_the_default_redaction():
    dry = DryRun("ssh", "j", {"env": {"HF_TOKEN": "hunter2-tok", "PATH": "/bin"}},
                 files=(("run/env.sh", "export DB_PASSWORD=hunter2-pw\n"),), notes=("n1",), warnings=("w1",))
    text, shown = dry.render(), json.loads(dry.to_json())
    assert "hunter2" not in text and "hunter2" not in dry.to_json()
    assert shown == {"target": "ssh", "job": "j", "request": {"env": {"HF_TOKEN": "***", "PATH": "/bin"}},
                     "files": {"run/env.sh": "export DB_PASSWORD=***\n"}, "notes": ["n1"], "warnings": ["w1"]}
    assert text.splitlines()[0] == "target ssh: job j"
    assert "--- file run/env.sh\nexport DB_PASSWORD=***\nnote: n1\n" in text
    assert "w1" not in text  # warnings go to stderr through the CLI, not into the printed request
    assert dry.request["env"]["HF_TOKEN"] == "hunter2-tok"  # what runs is the real value


def test_a_target_passes_its_own_redaction():
    def hide_role(value):
        return {k: ("<role>" if k == "RoleArn" else v) for k, v in value.items()} if isinstance(value, dict) else value

    dry = DryRun("sagemaker", "j", {"RoleArn": "arn:aws:iam::1:role/x", "Name": "j"}, redact=hide_role)
    assert json.loads(dry.to_json())["request"] == {"RoleArn": "<role>", "Name": "j"}
    assert '"RoleArn": "<role>"' in dry.render()
    # The hook is how it prints, not what it is: two dry runs of the same request are equal.
    assert dry == DryRun("sagemaker", "j", {"RoleArn": "arn:aws:iam::1:role/x", "Name": "j"})


def test_each_target_says_which_python_its_hosts_run(tmp_path):
    """Target.python, not a table in the CLI or stack/resolve.py, names the ranks' interpreter, and the compiled
    program runs with it (the slurm target's own choice, sys.executable on a sim cluster, was the table's
    'python' before)."""
    import argparse
    import sys
    import textwrap

    from mpirun_kit.cli.resolve import compile_from_args
    from mpirun_kit.cluster.local import LocalFacts
    from mpirun_kit.targets import get_target

    settings = {"local": "", "sim": "", "ssh": "ssh: {hosts: [a, b], python: /opt/venv/bin/python3}",
                "slurm": "slurm: {partition: p, python: /shared/venv/bin/python}"}
    want = {"local": sys.executable, "sim": sys.executable, "ssh": "/opt/venv/bin/python3",
            "slurm": "/shared/venv/bin/python"}
    facts = LocalFacts(None, 0, None, "openmpi4", 2, False)
    got = {}
    for name, extra in settings.items():
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(textwrap.dedent(f"""\
            apiVersion: mpirun_kit/v1
            kind: Job
            name: py-{name}
            target:
              type: {name}
              {extra}
            program: {{module: mpirun_kit.workloads.allreduce}}
            """))
        args = argparse.Namespace(spec=str(spec), target=None, region=None, stack_output=[])
        compiled, _ = compile_from_args(args, facts, offline=True)
        assert get_target(name).python(compiled.job) == want[name]
        got[name] = compiled.launch.program[0]
    assert got == want
    assert get_target("sagemaker").python(compiled.job) == "python"   # the training image's (docker/Dockerfile)


def test_a_target_that_does_not_separate_start_from_run_says_so():
    import pytest

    from mpirun_kit.targets import get_target

    with pytest.raises(NotImplementedError, match="target 'sagemaker' starts its jobs only inside run()"):
        get_target("sagemaker").start(None)
