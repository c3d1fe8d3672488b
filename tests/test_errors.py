"""errors.py: the ExitCode enum is the one exit-code table; the README's table is checked against it."""
from __future__ import annotations

import re
from pathlib import Path

from mpirun_kit.errors import ClusterError, ExitCode, SpecError, translate

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_codes() -> dict[str, str]:
    text = README.read_text()
    table = text[text.index("## Exit codes"):].split("\n\n", 2)[1]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| ([0-9+N–-]+) \| (.+) \|$", table, re.M)}


def test_readme_table_lists_every_exit_code_and_no_other():
    rows = _readme_codes()
    # 1-63 (the job's own, and FAILED = 1 when it is unknown) and 128+N (signals) are ranges;
    # every other row is an ExitCode value.
    ours = {str(int(c)) for c in ExitCode if 63 < c < 128 or c in (ExitCode.OK, ExitCode.USAGE)}
    assert set(rows) - {"1–63", "128+N"} == ours
    signals = rows["128+N"]
    for code in (c for c in ExitCode if c >= 128):
        assert f"{int(code)} = {code.name if code.name.startswith('SIG') else 'SIGINT'}" in signals


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
