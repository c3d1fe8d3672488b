"""cli/submit.py: the submit flags become the service's typed request, and what submit prints of its own.

The job service itself (service/runner.py) is tested in tests/service/; whole submits, local and sim, in
tests/targets/.  Here: the parsing and printing this module does, through the real parser.  The one fake
is the service handed to ``detach`` (its ``detach`` starts a real supervisor, tested in
tests/service/test_supervise.py): what is printed does not depend on it.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

from mpirun_kit.cli import submit
from mpirun_kit.cli.main import build_parser, main
from mpirun_kit.core import verbosity
from mpirun_kit.records import JobState
from mpirun_kit.service.requests import SubmitRequest


def parse(*argv: str):
    args = build_parser().parse_args(["submit", *argv])
    args.verbosity = verbosity.DEFAULT if not getattr(args, "quiet", False) else verbosity.QUIET
    return args


def test_every_flag_reaches_the_request():
    args = parse("jobs/allreduce-bench.yaml", "--target", "sim", "--region", "eu-west-1",
                 "--stack-output", "mrk-vpc.SubnetId=subnet-1", "--stack-output", "mrk-efs.Id=fs-2",
                 "--job-name", "coco-1", "--wait", "--keep-keys", "--resume-from", "coco-0", "--detach")
    assert submit.request_of(args) == SubmitRequest(
        spec="jobs/allreduce-bench.yaml", target="sim", region="eu-west-1",
        stack_outputs=("mrk-vpc.SubnetId=subnet-1", "mrk-efs.Id=fs-2"), job_name="coco-1", wait=True,
        keep_keys=True, resume_from="coco-0", detach=True, verbosity=verbosity.DEFAULT)


def test_no_flags_is_the_requests_defaults_at_the_commands_level():
    req = submit.request_of(parse("jobs/allreduce-bench.yaml"))
    assert req == SubmitRequest(spec="jobs/allreduce-bench.yaml", verbosity=verbosity.DEFAULT)


def test_the_job_id_is_said_at_v_and_not_by_default_when_stderr_is_redirected(capsys):
    rec = SimpleNamespace(job_id="j-7", run_dir="/runs/j-7")
    submit.say_job(rec, verbosity.DEFAULT)      # capsys: stderr is not a terminal
    assert capsys.readouterr().err == ""
    submit.say_job(rec, verbosity.VERBOSE)
    assert capsys.readouterr().err == "mpirun_kit: job j-7 (run directory /runs/j-7)\n"


class _DetachingService:
    """Stands for JobService.detach, which starts a real supervisor (tests/service/test_supervise.py)."""

    def __init__(self):
        self.levels = []

    def detach(self, sub, level):
        self.levels.append(level)
        return SimpleNamespace(state=JobState.RUNNING)


def test_detach_prints_the_id_alone_on_stdout_and_how_to_follow_it_on_stderr(capsys):
    svc, sub = _DetachingService(), SimpleNamespace(record=SimpleNamespace(job_id="j-8", run_dir="/runs/j-8"))
    assert submit.detach(parse("x.yaml", "--detach"), svc, sub) == 0
    out = capsys.readouterr()
    assert out.out == "j-8\n"   # a script takes the id from stdout: nothing else there
    assert "`mpirun_kit status j-8`" in out.err and "`mpirun_kit cancel j-8`" in out.err
    assert svc.levels == [verbosity.DEFAULT]


def test_detach_json_is_one_line_and_quiet_says_nothing_more(capsys):
    sub = SimpleNamespace(record=SimpleNamespace(job_id="j-9", run_dir="/runs/j-9"))
    submit.detach(parse("x.yaml", "--detach", "--json", "-q"), _DetachingService(), sub)
    out = capsys.readouterr()
    assert json.loads(out.out) == {"job_id": "j-9", "state": "running", "run_dir": "/runs/j-9"}
    assert out.err == ""


def test_json_ends_stdout_with_an_outcome_even_when_the_spec_is_missing(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    code = main(["submit", str(missing), "--json", "--state-dir", str(tmp_path / "state")])
    out = capsys.readouterr()
    assert code == 64
    last = json.loads(out.out.strip().splitlines()[-1])
    assert last["exit_code"] == 64 and last["source"] == "launcher"
    assert str(missing) in out.err
