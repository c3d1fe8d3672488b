"""The result channel under a small version of the 256 x 8 load (benchmarks/bench_channel.py): ~300 real
loopback connections driven by two client processes through the real senders (RankLink for ranks,
MasterLink for workers), one progress report per rank per second for a few seconds.

Correctness only, never timings: every report sent is recorded, in order, none is rejected, every rank's
start and exit count once, and no worker is declared lost while it heartbeats.
"""
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from bench_channel import run_load  # noqa: E402

HOSTS, PER_HOST, SECONDS = 34, 8, 3          # 272 ranks + 33 workers = 305 connections


@pytest.fixture(scope="module")
def figures():
    return run_load(HOSTS, PER_HOST, SECONDS, clients=2, settle_s=0.5)


def test_every_progress_report_sent_is_recorded_in_order(figures):
    ranks = HOSTS * PER_HOST
    assert figures["connections"] == ranks + HOSTS - 1 == 305
    assert figures["send_failures"] == 0
    assert figures["sent_progress"] == ranks * SECONDS
    assert figures["recorded_progress"] == figures["sent_progress"]
    assert figures["ranks_with_every_step"] == ranks          # steps 1..SECONDS, none missing or reordered


def test_start_and_exit_count_once_per_rank_and_nothing_is_rejected(figures):
    ranks = HOSTS * PER_HOST
    assert (figures["recorded_starts"], figures["recorded_exits"]) == (ranks, ranks)
    assert figures["rejected"] == 0, figures["rejected_reasons"]


def test_heartbeating_workers_are_all_connected_and_none_is_lost(figures):
    assert figures["sent_heartbeats"] == (HOSTS - 1) * SECONDS
    assert figures["connected_workers"] == HOSTS - 1
    assert figures["lost_workers"] == []
