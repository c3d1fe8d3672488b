"""errors.py: the ExitCode enum and the one exit-code table generated from it."""
from __future__ import annotations

from pathlib import Path

from mpirun_kit.errors import ClusterError, ExitCode, SpecError, exit_code_markdown, exit_code_rows, translate

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_the_one_table_lists_every_exit_code_and_no_other():
    """errors.exit_code_rows is the table --help, README.md and docs/cli.md are generated from
    (tests/cli/test_main_usage.py checks those copies against it)."""
    rows = dict(exit_code_rows())
    # 1-63 (the job's own) and 128+N (signals) are ranges; every other row is an ExitCode value.
    assert set(rows) - {"1-63", "128+N"} == {str(int(c)) for c in ExitCode if c < 128}
    for code in (c for c in ExitCode if c >= 128):
        assert f"{int(code)} {code.name if code.name.startswith('SIG') else 'Ctrl-C'}" in rows["128+N"]
    assert "127" in rows and "not found" in rows["127"]


def test_docs_table_is_the_generated_markdown():
    assert exit_code_markdown() in DOCS.read_text()


def test_signal_codes_are_128_plus_n():
    assert (ExitCode.for_signal(2), ExitCode.for_signal(9), ExitCode.for_signal(15)) == (
        ExitCode.INTERRUPTED, ExitCode.SIGKILL, ExitCode.SIGTERM)


def test_library_errors_translated_with_a_remedy():
    assert translate(ValueError("x")) is None
    err = translate(FileNotFoundError(2, "No such file or directory", "/nope/job.yaml"))
    assert isinstance(err, SpecError) and str(err) == (
        "/nope/job.yaml: No such file or directory; check the path and its permissions")
    NoRegionError = type("NoRegionError", (Exception,), {"__module__": "botocore.exceptions"})
    assert str(translate(NoRegionError())).startswith("no AWS region configured; pass --region REGION")
    NoCredentialsError = type("NoCredentialsError", (Exception,), {"__module__": "botocore.exceptions"})
    assert isinstance(translate(NoCredentialsError("none")), ClusterError)
