"""mpirun_kit/redact.py, and every output that goes through it: plan text and JSON (program too), dry-run
requests and shipped files, the failure text, log records, and mpirun's (so local ranks') environment."""
from __future__ import annotations

import json
import logging

from mpirun_kit.cluster import Cluster, Host
from mpirun_kit.exec.result import RankFailure, job_result
from mpirun_kit.spec.launch_spec import LaunchSpec
from mpirun_kit.plan import build_launch_plan, render, to_json
from mpirun_kit.plan.env import launcher_env, resolve_env
from mpirun_kit.redact import (REDACTED, RedactingFilter, is_secret, redact_arg, redact_argv, redact_pairs, redact_text,
                               redact_value)
from mpirun_kit.targets.base import DryRun

SECRETS = ("s3cr3t-api", "hunter2-pw", "tok-abc123")
PROGRAM = ("python", "train.py", "--api-key=s3cr3t-api", "--password", "hunter2-pw", "HF_TOKEN=tok-abc123",
           "--lr", "0.1", "--tokens-file")


def _none_shown(text: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{s} shown in:\n{text}"


def test_argv_one_token_and_two_token_flags():
    assert redact_argv(PROGRAM) == ["python", "train.py", "--api-key=***", "--password", "***", "HF_TOKEN=***",
                                    "--lr", "0.1", "--tokens-file"]
    # a secret-looking flag followed by another flag hides nothing (it takes no value here)
    assert redact_argv(["--use-token", "--lr", "1"]) == ["--use-token", "--lr", "1"]


def test_free_text():
    line = 'error: --password hunter2-pw rejected; HF_TOKEN=tok-abc123 --api-key="s3cr3t-api" lr=0.1'
    assert redact_text(line) == 'error: --password *** rejected; HF_TOKEN=*** --api-key=*** lr=0.1'
    assert redact_text("auth failed for value s3cr3t-api", known=["s3cr3t-api", "x"]) == "auth failed for value ***"


def test_plan_text_and_json_hide_program_secrets():
    plan = build_launch_plan(LaunchSpec(program=PROGRAM), Cluster((Host("h"),), "h", "x"), {}, 0)
    _none_shown(render(plan))
    shown = json.loads(to_json(plan))
    _none_shown(json.dumps(shown))
    assert shown["program"][2:5] == ["--api-key=***", "--password", "***"]
    assert plan.program == PROGRAM  # what runs is unchanged


def test_dry_run_request_and_shipped_files():
    spec = LaunchSpec(program=PROGRAM, env=(("DB_PASSWORD", "hunter2-pw"),))
    dry = DryRun("ssh", "j", {"commands": {"a": "cd /w && exec python -m x --password hunter2-pw"},
                              "ContainerArguments": list(PROGRAM)},
                 files=(("/w/launch-spec.json", spec.to_json() + "\n"),))
    _none_shown(dry.render())
    _none_shown(dry.to_json())
    assert json.loads(redact_value(spec.to_json()))["program"][3:5] == ["--password", "***"]


def test_failure_text_hides_secrets_quoted_from_output():
    failure = RankFailure(rank=1, host="algo-2", exit_code=3, signal=None, first_seen=1.0)
    result = job_result(1, None, (failure,), launcher_tail=(
        "[1 algo-2] Traceback: login(--password hunter2-pw) failed", "[1 algo-2] HF_TOKEN=tok-abc123 invalid"))
    assert result.exit_code == 3
    _none_shown(result.summary)
    assert "HF_TOKEN=***" in result.summary


def test_log_records_are_redacted(caplog):
    logger = logging.getLogger("mpirun_kit.test_redact")
    f = RedactingFilter()
    caplog.handler.addFilter(f)
    try:
        logger.warning("running %s", " ".join(PROGRAM))
    finally:
        caplog.handler.removeFilter(f)
    _none_shown(caplog.text)
    assert "--password ***" in caplog.text


def test_mpirun_environment_is_the_allow_list_not_the_masters_whole_environment():
    environ = {"PATH": "/bin", "HOME": "/root", "OMPI_MCA_btl": "tcp,self", "DB_PASSWORD": "hunter2-pw",
               "UNLISTED": "x", "AWS_SECRET_ACCESS_KEY": "s3cr3t-api", "NCCL_DEBUG": "INFO"}
    env, _ = resolve_env(environ, explicit=(("MY_FLAG", "1"),))
    assert launcher_env(environ, env) == {"PATH": "/bin", "HOME": "/root", "OMPI_MCA_btl": "tcp,self",
                                          "NCCL_DEBUG": "INFO", "MY_FLAG": "1"}


def test_redaction():
    assert [is_secret(n) for n in ("HF_TOKEN", "DB_PASSWORD", "api_key", "MY_CREDENTIALS", "PATH", "AWS_SESSION_TOKEN")] \
        == [True, True, True, True, False, True]
    assert redact_pairs([("PATH", "/bin"), ("HF_TOKEN", "x")]) == (("PATH", "/bin"), ("HF_TOKEN", REDACTED))
    assert redact_arg("HF_TOKEN=abc") == "HF_TOKEN=***"
    assert redact_arg("NCCL_DEBUG=INFO") == "NCCL_DEBUG=INFO"
    assert redact_arg("-x") == "-x"
