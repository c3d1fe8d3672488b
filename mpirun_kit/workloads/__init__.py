"""Workloads: programs a job runs on its ranks (not the toolkit's own measurements, which live in benchmarks/).

``allreduce`` is both jobs/allreduce-bench.yaml's program and the doctor's
cross-host smoke test.  ``plan_note`` is the hook through which a program says
something of its own in ``mpirun_kit plan`` (the Mask R-CNN trainer: its schedule
scaled to the job's world size), so the launcher knows no workload by name.
"""
from __future__ import annotations

import importlib
from typing import Sequence

#: program module (``program.module`` of a job) -> "module:function", the function taking (the argv every
#: rank runs, the number of ranks) and returning a line for the plan, or None.  Named, not imported: the
#: program's package is loaded only when a plan runs that program.
PLAN_NOTES: dict[str, str] = {
    "mpirun_kit.maskrcnn.train": "mpirun_kit.maskrcnn.config:schedule_for_program",
}


def plan_note(module: str | None, program: Sequence[str], world_size: int) -> str | None:
    """What the program ``module`` adds to a plan of ``program`` on ``world_size`` ranks; None when nothing."""
    ref = PLAN_NOTES.get(module or "")
    if ref is None:
        return None
    mod, _, func = ref.partition(":")
    return getattr(importlib.import_module(mod), func)(program, world_size)
