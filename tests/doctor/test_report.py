"""doctor/report.py: the doctor's verdict as a table for people and JSON for scripts, from a report value."""
from __future__ import annotations

import json

from mpirun_kit.doctor.checks import Check
from mpirun_kit.doctor.coordinate import DoctorReport
from mpirun_kit.doctor.report import render_json, render_table

REPORT = DoctorReport(checks=(
    Check("gpus", "algo-1", "ok", "8 x H100"),
    Check("efa", "algo-1", "fail", "no EFA device", fix="use an EFA-enabled instance type"),
    Check("nccl", "algo-22", "warn", "NCCL 2.18", fix="upgrade NCCL"),
    Check("ssh", "algo-22", "ok", "modes ok", fix="never shown for ok rows"),
), unreachable=(("algo-3", "timed out"),))


def test_the_table_has_a_row_per_check_the_fix_under_failures_and_warnings_and_counts():
    assert render_table(REPORT) == (
        "HOST     CHECK  STATUS  DETAIL\n"
        "algo-1   gpus   ok      8 x H100\n"
        "algo-1   efa    FAIL    no EFA device\n"
        "                        fix: use an EFA-enabled instance type\n"
        "algo-22  nccl   WARN    NCCL 2.18\n"
        "                        fix: upgrade NCCL\n"
        "algo-22  ssh    ok      modes ok\n"
        "\n"
        "2 ok, 1 warn, 1 fail\n")
    assert render_table(DoctorReport(checks=())).endswith("\nno checks\n")


def test_the_json_says_ok_only_without_a_failure_and_keeps_every_row():
    out = json.loads(render_json(REPORT))
    assert out["ok"] is False
    assert [c["status"] for c in out["checks"]] == ["ok", "fail", "warn", "ok"]
    assert out["unreachable"] == {"algo-3": "timed out"} and out["allreduce"] is None
    assert json.loads(render_json(DoctorReport(checks=REPORT.checks[:1])))["ok"] is True
