"""Renders a DoctorReport: a table for people, JSON for machines.  Pure text in, text out."""
from __future__ import annotations

import json
from dataclasses import asdict

from .coordinate import DoctorReport

_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "absent": "absent", "skip": "skip"}


def render_table(report: DoctorReport, width: int = 100) -> str:
    """One row per check: HOST  CHECK  STATUS  DETAIL, with the fix under each failing or warning row."""
    hw = max([len("HOST")] + [len(c.host) for c in report.checks])
    cw = max([len("CHECK")] + [len(c.name) for c in report.checks])
    lines = [f"{'HOST':<{hw}}  {'CHECK':<{cw}}  {'STATUS':<6}  DETAIL"]
    for c in report.checks:
        lines.append(f"{c.host:<{hw}}  {c.name:<{cw}}  {_MARK.get(c.status, c.status):<6}  {c.detail}")
        if c.fix and c.status in ("fail", "warn"):
            lines.append(f"{'':<{hw}}  {'':<{cw}}  {'':<6}  fix: {c.fix}")
    counts = {s: sum(1 for c in report.checks if c.status == s) for s in _MARK}
    lines.append("")
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no checks")
    return "\n".join(lines) + "\n"


def render_json(report: DoctorReport) -> str:
    """The whole report: every row, every host's facts, the allreduce result."""
    return json.dumps({
        "ok": not report.failed,
        "checks": [asdict(c) for c in report.checks],
        "facts": [asdict(f) for f in report.facts],
        "allreduce": asdict(report.allreduce) if report.allreduce else None,
        "unreachable": dict(report.unreachable),
    }, indent=2, sort_keys=True) + "\n"
