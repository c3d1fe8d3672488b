"""workloads.plan_note: the hook through which a program adds its own line to `mpirun_kit plan`."""
from __future__ import annotations

import importlib

from mpirun_kit.workloads import PLAN_NOTES, plan_note

TRAIN = ["python", "-m", "mpirun_kit.maskrcnn.train", "--config", "r50_fpn_1x"]


def test_every_registered_note_is_a_function_of_its_program():
    for module, ref in PLAN_NOTES.items():
        mod, _, func = ref.partition(":")
        assert callable(getattr(importlib.import_module(mod), func)), ref
        importlib.import_module(module)  # the program the note is about exists


def test_the_trainer_says_its_schedule_and_other_programs_say_nothing():
    note = plan_note("mpirun_kit.maskrcnn.train", TRAIN, 32)
    assert note.startswith("maskrcnn schedule x0.125 (reference batch 16 / global batch 128): max_iter=11250 "), note
    assert plan_note("mpirun_kit.workloads.allreduce", ["python", "-m", "mpirun_kit.workloads.allreduce"], 8) is None
    assert plan_note(None, ["python", "train.py"], 8) is None
