"""Every target behind one interface (targets/base.Target): prepare -> DryRun, run -> Outcome."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import ClusterError, SpecError
from mpirun_kit.targets import TARGET_MODULES, get_target
from mpirun_kit.targets.base import DryRun, SubmitOptions, Target


def test_every_target_is_registered_under_its_name():
    for name in TARGET_MODULES:
        t = get_target(name)
        assert isinstance(t, Target) and t.name == name
        for method in ("dryrun", "run"):
            assert getattr(type(t), method) is not getattr(Target, method), f"{name} does not implement {method}"
    with pytest.raises(SpecError, match=r"target 'k8s' is unknown; expected one of \['local', 'sagemaker', 'sim', 'slurm', 'ssh'\]"):
        get_target("k8s")


def test_sagemaker_choices_and_error_source():
    t = get_target("sagemaker")
    assert t.error_source(ClusterError("AccessDenied")) == "platform"
    assert get_target("ssh").error_source(ClusterError("no sshd")) == "launcher"
    o = t.error_outcome("job", ClusterError("AWS refused the request: AccessDenied\nmore"), 0.0)
    assert (o.target, o.exit_code, o.source, o.reason) == ("sagemaker", 69, "platform",
                                                          "AWS refused the request: AccessDenied")


def test_prepare_is_the_dry_run_with_the_callers_choices(tmp_path):
    from mpirun_kit.spec.compile import compile_job
    from mpirun_kit.spec.load import load_job_text

    text = ("apiVersion: mpirun_kit/v1\nkind: Job\nname: reg\ntarget: {type: ssh, ssh: {hosts: [a, b], "
            f"workdir: {tmp_path}}}}}\nprogram: {{command: ['true']}}\n")
    compiled = compile_job(load_job_text(text, "job.yaml"))
    dry = get_target("ssh").prepare(compiled, SubmitOptions())
    assert isinstance(dry, DryRun) and dry.target == "ssh"
    assert dry.request.workdir.startswith(f"{tmp_path}/reg-")
    assert set(dry.request.cancel) == set(dry.request.ship) == {"a", "b"}


def _compiled_for(name: str, tmp_path):
    """A small job for target ``name``, compiled offline (sagemaker: the shared spec, stack outputs given)."""
    import textwrap

    from mpirun_kit.spec.compile import compile_job
    from mpirun_kit.spec.load import load_job_text

    from .sagemaker_specs import OUTPUTS, SPEC

    if name == "sagemaker":
        return compile_job(load_job_text(SPEC, "mrcnn.yaml"), python="python", resolver=OUTPUTS.__getitem__)
    extra = {"ssh": f"ssh: {{hosts: [a, b], workdir: {tmp_path}}}", "slurm": f"slurm: {{partition: p, workdir: {tmp_path}}}"}
    text = textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: typed-{name}
        target:
          type: {name}
          {extra.get(name, "")}
        program: {{command: ['true']}}
        """)
    return compile_job(load_job_text(text, "job.yaml"), python="python")   # the program is `true`: no python runs


@pytest.mark.parametrize("name", TARGET_MODULES)
def test_every_target_declares_a_dataclass_request_and_its_dry_run_carries_one(name, tmp_path):
    """Issue #28 item 2: a typed request per target (base.Target's R), not a dict; the detached supervisor rebuilds
    it from its JSON with ``request_from``.  (ssh, sagemaker and slurm carried dicts before: this failed for them.)"""
    import dataclasses

    from mpirun_kit.targets.base import plain

    t = get_target(name)
    assert t.request_type is not None and dataclasses.is_dataclass(t.request_type), f"{name}: no request dataclass"
    assert t.request_type.__dataclass_params__.frozen, f"{name}: its request is not frozen"
    dry = t.prepare(_compiled_for(name, tmp_path), SubmitOptions(job_id="j1", run_dir=str(tmp_path / "run")))
    assert isinstance(dry.request, t.request_type)
    assert t.request_from(plain(dry.request)) == dry.request
