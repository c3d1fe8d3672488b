"""workloads.plan_note: the hook through which a program adds its own line to `mpirun_kit plan`, found through the
``mpirun_kit.workloads`` entry-point group (setup.cfg), not by a string import (issue 31 item 5)."""
from __future__ import annotations

import importlib
from pathlib import Path

from mpirun_kit.workloads import GROUP, plan_note, plan_notes

from string_imports_contract import entry_points_of

TRAIN = ["python", "-m", "mpirun_kit.maskrcnn.train", "--config", "r50_fpn_1x"]
SETUP_CFG = Path(__file__).resolve().parents[2] / "setup.cfg"


def test_the_installed_hooks_are_the_declared_ones():
    """The entry points come from the installed metadata: one stale install (setup.cfg changed since) is named."""
    declared = {name: value for _, name, value in entry_points_of(SETUP_CFG, {GROUP})}
    assert declared, f"setup.cfg declares no {GROUP} entry point"
    assert plan_notes() == declared, ("the installed entry points differ from setup.cfg's; reinstall: "
                                      "pip install --no-build-isolation -e .")


def test_every_registered_note_is_a_function_of_its_program():
    for module, ref in plan_notes().items():
        mod, _, func = ref.partition(":")
        assert callable(getattr(importlib.import_module(mod), func)), ref
        importlib.import_module(module)  # the program the note is about exists


def test_the_trainer_says_its_schedule_and_other_programs_say_nothing():
    note = plan_note("mpirun_kit.maskrcnn.train", TRAIN, 32)
    assert note.startswith("maskrcnn schedule x0.125 (reference batch 16 / global batch 128): max_iter=11250 "), note
    assert plan_note("mpirun_kit.workloads.allreduce", ["python", "-m", "mpirun_kit.workloads.allreduce"], 8) is None
    assert plan_note(None, ["python", "train.py"], 8) is None
