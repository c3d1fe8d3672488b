"""Workloads: programs a job runs on its ranks (not the toolkit's own measurements, which live in benchmarks/).

``allreduce`` is both jobs/allreduce-bench.yaml's program and the doctor's
cross-host smoke test.  ``plan_note`` is the hook through which a program says
something of its own in ``mpirun_kit plan`` (the Mask R-CNN trainer: its schedule
scaled to the job's world size), so the launcher knows no workload by name.

A program registers its hook as an entry point of the ``mpirun_kit.workloads`` group
(setup.cfg ``[options.entry_points]``): the name is the program's module (``program.module``
of a job), the value the function taking (the argv every rank runs, the number of ranks) and
returning a line for the plan, or None.  The program's package is loaded only when a plan runs
that program, and no module of ours names it in a string: the ``string-imports`` contract
(setup.cfg, tests/test_layering.py) checks that each entry point leads into a program's own
folder, whose imports the other contracts check.
"""
from __future__ import annotations

from importlib.metadata import entry_points
from typing import Sequence

#: the entry-point group a program's plan hook is registered in.
GROUP = "mpirun_kit.workloads"


def plan_notes() -> dict[str, str]:
    """Program module -> its hook (``module:function``), as installed."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def plan_note(module: str | None, program: Sequence[str], world_size: int) -> str | None:
    """What the program ``module`` adds to a plan of ``program`` on ``world_size`` ranks; None when nothing."""
    if not module:
        return None
    for ep in entry_points(group=GROUP):
        if ep.name == module:
            return ep.load()(program, world_size)
    return None
