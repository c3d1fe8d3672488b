"""cli/main.py as a forgiving command line (issue 22, item 6): suggestions for mistyped commands,
choices and flags, -q with -v refused, user commands listed before internal ones, shell completion
through argcomplete's own protocol (a real subprocess), and one exit-code table for --help and the docs."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .cli_helpers import REPO


@pytest.mark.parametrize("argv, line", [
    (("sumbit", "jobs/allreduce-bench.yaml"),
     "mpirun_kit: error: unknown command 'sumbit' (did you mean `submit`?); see `mpirun_kit --help`"),
    (("stack", "deplyo"),
     "mpirun_kit: error: stack: unknown command 'deplyo' (did you mean `deploy`?); see `mpirun_kit stack --help`"),
    (("submit", "jobs/allreduce-bench.yaml", "--jsn"),
     "mpirun_kit: error: submit: unrecognized argument: '--jsn' (did you mean `--json`?); "
     "see `mpirun_kit submit --help`"),
    (("validate", "jobs/", "--target", "lcal"),
     "mpirun_kit: error: validate: --target: unknown value 'lcal' (did you mean `local`?); expected one of "
     "local, sim, ssh, sagemaker, slurm; see `mpirun_kit validate --help`"),
    (("frobnicate",), "mpirun_kit: error: unknown command 'frobnicate'; see `mpirun_kit --help`"),
])
def test_a_mistyped_command_choice_or_flag_gets_a_suggestion(argv, line, cli):
    r = cli(*argv)
    assert (r.rc, r.err, r.out) == (2, line + "\n", "")


@pytest.mark.parametrize("argv", [("-q", "validate", "jobs/", "-v"), ("validate", "jobs/", "-q", "-vv"),
                                  ("-v", "validate", "-q", "jobs/")])
def test_quiet_and_verbose_together_are_refused_with_one_line(argv, cli, monkeypatch):
    monkeypatch.chdir(REPO)
    r = cli(*argv)
    assert r.rc == 2 and r.out == ""
    assert r.err == ("mpirun_kit: error: validate: -q (only errors and the result) and -v (also progress) "
                     "contradict each other; give one; see `mpirun_kit validate --help`\n")


def test_help_lists_user_commands_before_internal_ones(cli):
    r = cli("--help")
    listed = re.findall(r"^    (\w+) ", r.out, re.M)
    assert listed[:3] == ["validate", "plan", "submit"]
    internal = [listed.index(c) for c in ("sim", "entrypoint", "launch")]
    assert min(internal) > max(listed.index(c) for c in ("stack", "keys", "doctor", "timeline", "status"))


def test_top_level_help_lists_every_exit_code_from_the_one_table(cli):
    from mpirun_kit.errors import EXIT_CODE_TEXT, ExitCode, exit_code_rows

    block = cli("--help").out.split("exit codes:\n", 1)[1]
    assert [tuple(re.split(r"\s{2,}|(?<=\S) ", line.strip(), maxsplit=1)) for line in block.splitlines()] \
        == exit_code_rows()
    # every code the enum names below 128 has its line (the signal codes are the 128+N row)
    assert {int(c) for c in ExitCode if c < 128} == set(EXIT_CODE_TEXT)
    assert "127" in dict(exit_code_rows())


def test_docs_exit_code_table_is_the_generated_one():
    """docs/cli.md holds errors.exit_code_markdown() between its markers (regenerate it, never hand-edit)."""
    from mpirun_kit.errors import exit_code_markdown

    text = (REPO / "docs" / "cli.md").read_text()
    m = re.search(r"<!-- exit-codes:begin -->\n(.*?)<!-- exit-codes:end -->", text, re.S)
    assert m, "docs/cli.md has no <!-- exit-codes:begin --> ... <!-- exit-codes:end --> block"
    assert m.group(1) == exit_code_markdown()


def test_readme_exit_code_table_if_any_is_the_generated_one():
    from mpirun_kit.errors import exit_code_markdown

    text = (REPO / "README.md").read_text()
    tables = re.findall(r"^\| code \| meaning \|\n(?:\|.*\n)+", text, re.M)
    assert all(t == exit_code_markdown() for t in tables)


def _complete(line: str, tmp_path) -> list[str]:
    """Ask the real program for completions as bash does (argcomplete's environment protocol)."""
    out = tmp_path / "candidates"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": "bash", "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
           "COMP_TYPE": "9"}
    r = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main"], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [c.strip() for c in out.read_text().split("\n")]


def test_completion_completes_commands_and_flags(tmp_path):
    assert set(_complete("mpirun_kit su", tmp_path)) == {"submit"}
    assert {"--json", "--dry-run"} <= set(_complete("mpirun_kit submit jobs/x.yaml --", tmp_path))
    assert set(_complete("mpirun_kit validate --target s", tmp_path)) == {"sim", "ssh", "sagemaker", "slurm"}


def test_completion_command_prints_the_argcomplete_hook(cli):
    r = cli("completion", "bash")
    assert r.rc == 0 and "complete " in r.out and "mpirun_kit" in r.out and "_ARGCOMPLETE" in r.out
