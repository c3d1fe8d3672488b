"""exec/channel/protocol.py: what a validly signed message may still not say, checked against the plan.

The server and link refusing such messages end to end (counted in the result's ``rejections``) are tested in
test_server_trust.py; here each rule on its own, with the refusal's words.
"""
from __future__ import annotations

import pytest

from mpirun_kit.exec.channel.protocol import check_rank_identity, check_rank_report, valid_from_master

HOSTS = {0: "algo-1", 1: "algo-1", 2: "algo-2"}


def _msg(**kw):
    return {"type": "rank", "event": "exit", "rank": 2, "host": "algo-2", "t": 1.5, "exit_code": 0, **kw}


@pytest.mark.parametrize("changes, why", [
    ({"rank": 3}, "rank '3' is not a rank of this job (0-2)"),
    ({"rank": True}, "rank 'True' is not a rank of this job (0-2)"),
    ({"host": "algo-1"}, "rank 2 reported host 'algo-1'; the plan places it on algo-2"),
    ({"t": float("nan")}, "time 'nan' is not a finite number"),
])
def test_a_rank_is_one_of_the_plan_on_its_planned_host_at_a_finite_time(changes, why):
    assert check_rank_identity(_msg(**changes), HOSTS) == why
    assert check_rank_report(_msg(**changes), HOSTS) == (None, why)


@pytest.mark.parametrize("changes, why", [
    ({"exit_code": None}, "an exit report needs exactly one of exit_code and signal"),
    ({"signal": "SIGKILL"}, "an exit report needs exactly one of exit_code and signal"),
    ({"exit_code": 256}, "exit_code '256' is not an integer 0-255"),
    ({"exit_code": None, "signal": "SIGNOPE"}, "signal 'SIGNOPE' is not a signal name"),
    ({"event": "launch"}, "unknown rank event 'launch'"),
])
def test_an_exit_report_says_one_code_or_one_signal(changes, why):
    assert check_rank_report(_msg(**changes), HOSTS) == (None, why)


def test_a_report_keeps_only_known_fields_and_leaves_out_bad_figures():
    clean, why = check_rank_report(_msg(extra="x" * 1000, cpu_s=-1.0, hello_t=2), HOSTS)
    assert why == ""
    assert clean == {"type": "rank", "event": "exit", "rank": 2, "host": "algo-2", "t": 1.5, "exit_code": 0,
                     "signal": None, "hello_t": 2.0}
    start, _ = check_rank_report(_msg(event="start", local_rank=0, pid=10, program_pid="11", key_t=float("inf")),
                                 HOSTS)
    assert start == {"type": "rank", "event": "start", "rank": 2, "host": "algo-2", "t": 1.5, "local_rank": 0,
                     "pid": 10}


@pytest.mark.parametrize("msg, ok", [
    ({"type": "heartbeat"}, True),
    ({"type": "keys", "seed": "ab" * 32}, True),
    ({"type": "keys", "seed": "AB" * 32}, False),
    ({"type": "keys", "seed": "ab" * 31}, False),
    ({"type": "result", "exit_code": 3, "result": {}}, True),
    ({"type": "result", "exit_code": 3}, True),
    ({"type": "result", "exit_code": 300}, False),
    ({"type": "result", "exit_code": 3, "result": "x"}, False),
    ({"type": "shell", "cmd": "rm"}, False),
])
def test_what_a_worker_takes_from_its_master(msg, ok):
    assert valid_from_master(msg) is ok
