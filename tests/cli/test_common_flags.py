"""cli/common_flags.py: one home for what plan and submit share (flags, exit-code notes, ``say``, the
quota preflight); no command borrows from another command's module."""
from __future__ import annotations

import argparse
import ast
from pathlib import Path

from mpirun_kit.cli import common_flags
from mpirun_kit.targets import TARGET_MODULES

CLI = Path(common_flags.__file__).parent


def test_target_choices_are_the_registered_targets():
    p = argparse.ArgumentParser()
    common_flags.add_spec_args(p)
    action = next(a for a in p._actions if a.dest == "target")
    assert tuple(action.choices) == tuple(TARGET_MODULES)


def test_shared_flags_and_helpers_come_from_common_flags_only():
    """cli/submit.py took SPEC_CODE_NOTES, add_spec_args, say and quota_preflight from cli/plan.py before, and
    jobs, timeline, sim and run-detached took store_of and add_state_dir_arg from cli/submit.py."""
    shared = {"SPEC_CODE_NOTES", "add_spec_args", "say", "quota_preflight", "store_of", "add_state_dir_arg"}
    assert all(hasattr(common_flags, name) for name in shared)
    borrowed = []
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module != "common_flags":
                borrowed += [f"{path.name}: {a.name} from .{node.module}" for a in node.names if a.name in shared]
    assert borrowed == []
