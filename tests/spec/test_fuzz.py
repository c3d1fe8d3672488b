"""Fuzzing the loader: any text or structure must give a JobSpec or a SpecError, never a traceback.

Three generators: arbitrary text, YAML-ish token soup (indentation, flow
collections, anchors, tags, timestamps), and random structures grafted into a
valid spec and dumped as YAML.  Whatever loads must also compile.
"""
from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpirun_kit.errors import SpecError
from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID = {
    "apiVersion": "mpirun_kit/v1", "kind": "Job", "name": "fuzz",
    "target": {"type": "local"}, "resources": {"hosts": 1, "processes_per_host": 2},
    "program": {"module": "pkg.train", "args": ["--x", "${output}"]},
    "env": {"A": "1"}, "tuning": {"profile": "auto"}, "timeouts": {"job_s": 10},
}
KEYS = sorted(set(VALID) | {"data", "vpc", "spot", "mpi", "image", "retries", "pinning", "hyperparameters",
                            "type", "hosts", "module", "args", "fsx", "s3", "local", "mode", "subnets"})

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["${stack:a.B}", "${data:x}", "${", "auto", "sagemaker", "ml.p4d.24xlarge"]))
trees = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), kids, max_size=4)), max_leaves=12)

TOKENS = ["a", "name", "program", ":", ": ", "- ", "\n", "\n  ", "\n    ", "[", "]", "{", "}", ",", "'", '"',
          "&x ", "*x", "!!binary ", "!!python/object ", "? ", "|", ">", "#", "2024-13-45", "1e309", "~", "%YAML 1.1\n",
          "---\n", "...\n", "\t", "\\", "apiVersion: mpirun_kit/v1\n", "kind: Job\n", "${stack:x.Y}", "@", "`",
          "&r [*r]", "&m {k: *m}", "[" * 40, "<<: ", "!!set ", "!!omap ", "? [a]: b\n"]


OUTCOMES = {"rejected", "compiled", "rejected at compile"}


def graft(valid: dict, grafts: list) -> dict:
    """``valid`` with some top-level values replaced by random structures."""
    return {**valid, **dict(grafts)}


def check(text: str) -> str:
    """Any input either loads or fails with a SpecError that names the file; nothing else escapes."""
    try:
        job = load_job_text(text, "fuzz.yaml")
    except SpecError as exc:
        assert "fuzz.yaml" in str(exc), f"error does not name the file: {exc}"
        return "rejected"
    assert job.name, "a spec that loads has a name"
    try:
        compile_job(job, resolver=lambda stack: {})
    except SpecError as exc:
        assert str(exc).strip(), "empty error message"
        return "rejected at compile"
    return "compiled"


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    assert check(text) in OUTCOMES


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join))
def test_yaml_token_soup(text):
    assert check(text) in OUTCOMES


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(sorted(VALID)), trees), max_size=3), trees)
def test_random_structures_grafted_into_a_valid_spec(grafts, whole):
    assert check(yaml.safe_dump(graft(VALID, grafts))) in OUTCOMES
    assert check(yaml.safe_dump(whole)) in OUTCOMES


# --- LaunchSpec.from_json: hyperparameters.json and `entrypoint --spec` -------------------------------

LAUNCH_VALID = {"program": ["python", "train.py"], "processes_per_host": 2, "env": {"A": "1"},
                "mca": [["btl", "tcp"]], "timeouts": {"grace_s": 5, "job_s": None}, "ssh_port": 22}
LAUNCH_KEYS = sorted(set(LAUNCH_VALID) | {"env_forward", "mpi_flavour", "mpi_options", "pinning", "working_dir",
                                          "result_port", "grace_s", "job_s", "ssh_ready_s"})
launch_trees = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(LAUNCH_KEYS), st.text(max_size=6)), kids, max_size=4)), max_leaves=12)


def check_launch(text: str) -> str:
    """Any text gives a LaunchSpec that round-trips, or a SpecError naming the source; nothing else escapes."""
    from mpirun_kit.spec.launch_spec import LaunchSpec

    try:
        spec = LaunchSpec.from_json(text, "hyperparameters.json")
    except SpecError as exc:
        assert "hyperparameters.json" in str(exc), f"error does not name the source: {exc}"
        return "rejected"
    assert all(isinstance(a, str) for a in spec.program) and spec.program
    assert isinstance(spec.timeouts.grace_s, (int, float)) and spec.timeouts.grace_s >= 0
    assert LaunchSpec.from_json(spec.to_json()) == spec
    return "loaded"


@FUZZ
@given(st.text(max_size=200))
def test_launch_spec_arbitrary_text(text):
    assert check_launch(text) in ("rejected", "loaded")


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(sorted(LAUNCH_VALID)), launch_trees), max_size=3), launch_trees)
def test_launch_spec_random_structures_grafted_into_a_valid_one(grafts, whole):
    import json

    assert check_launch(json.dumps(graft(LAUNCH_VALID, grafts))) in ("rejected", "loaded")
    assert check_launch(json.dumps(whole)) in ("rejected", "loaded")
    nested = json.dumps({"program": ["x"], "timeouts": whole})
    assert check_launch(nested) in ("rejected", "loaded")
