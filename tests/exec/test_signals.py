"""exec/signals.py: the signal latch records the first stop signal, forwards each, and restores the handlers.

Real signals, sent to this process (pytest runs tests in the main thread, where handlers can be installed).
"""
from __future__ import annotations

import os
import signal

from mpirun_kit.exec.signals import FORWARDED, SignalLatch, signal_name
from mpirun_kit.exec.supervisor import Stop


def test_signal_names_and_a_number_without_one():
    assert signal_name(15) == "SIGTERM"
    assert signal_name(99) == "signal 99"


def test_the_first_signal_is_latched_and_every_one_forwarded():
    forwarded = []
    with SignalLatch(forward=forwarded.append) as latch:
        assert not latch() and latch.stop() is None
        os.kill(os.getpid(), signal.SIGHUP)     # without the latch this would end the test run
        os.kill(os.getpid(), signal.SIGTERM)
        assert latch() and latch.received == "SIGHUP" and latch.event.is_set()
        assert forwarded == [signal.SIGHUP, signal.SIGTERM]
        assert latch.stop() == Stop("user", "the terminal closed (SIGHUP)", 128 + signal.SIGHUP, "SIGHUP")


def test_the_handlers_before_it_are_back_after_it():
    before = {s: signal.getsignal(s) for s in FORWARDED}
    with SignalLatch():
        assert all(signal.getsignal(s) != before[s] for s in FORWARDED)
    assert {s: signal.getsignal(s) for s in FORWARDED} == before
