"""The flush-to-zero mode a test sets stays in that test (tests/maskrcnn/conftest.py ``_denormals_restored``).

The trainer flushes denormals in every thread of its process (issue #32), and the mode is per process,
not per test: a test that ran the trainer in-process left it on, and hypothesis's float strategies in
tests/spec, run later by the same pytest, then failed with "we can't represent subnormal floats right
now".  These two run in file order: the second fails without the fixture.
"""
from __future__ import annotations

import sys

from mpirun_kit.maskrcnn.ops import set_flush_denormal
from mpirun_kit.maskrcnn.train import denormals_flushed


def _main_thread_flushes() -> bool:
    return sys.float_info.min / 2 == 0.0   # the smallest normal float halved: a subnormal, unless flushed


def test_a_test_may_turn_the_flush_on():
    set_flush_denormal(True)
    assert denormals_flushed() and _main_thread_flushes()


def test_the_next_test_finds_denormals_kept():
    assert not denormals_flushed()
    assert not _main_thread_flushes()
