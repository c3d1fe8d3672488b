"""A moto server process on 127.0.0.1 for the length of a ``with`` block (a helper module, not a test file).

Used by the session's ``moto_server`` fixture (tests/conftest.py) and the README walk-through's patched
server (tests/stack/test_walkthrough.py): start, wait for /moto-api/ under a deadline, stop.
"""
from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_process(argv: list[str], port: int, *, timeout_s: float, what: str, **popen_kw):
    """Run ``argv`` (a moto server listening on ``port``); yield its URL once it answers."""
    proc = subprocess.Popen(argv, start_new_session=True, **{"stdout": subprocess.DEVNULL,
                                                             "stderr": subprocess.DEVNULL, **popen_kw})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{what} did not start on {url} within {timeout_s:g} s")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
