"""Test helper for the job's result (mpirun_kit/exec/result.py): a failure file read the way every reader reads it.

The failure file opens with the result's JSON head; ``code_and_text`` gives ``exit_code=N`` from that head, then
the text after it, so a test can assert both with one ``startswith``.
"""
from mpirun_kit.exec.result import split_failure


def code_and_text(failure: str) -> str:
    """``exit_code=N`` (from the failure file's JSON head), a newline, then the text for people."""
    head, text = split_failure(failure)
    assert head is not None, f"the failure file does not open with the result's JSON head:\n{failure}"
    return f"exit_code={head['exit_code']}\n{text}"
