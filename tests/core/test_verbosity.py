"""core/verbosity.py: the one output level's values, and the flags a target hands the hosts' entrypoints."""
from __future__ import annotations

import pytest

from mpirun_kit.cli.main import output_level
from mpirun_kit.core import verbosity


def test_levels_are_ordered_quiet_default_verbose():
    assert verbosity.QUIET < verbosity.DEFAULT < verbosity.VERBOSE


@pytest.mark.parametrize("verbose, quiet, flags", [
    (True, False, []),                  # progress lines: the entrypoint's own default
    (False, True, ["-q"]),              # only errors and the result
    (False, False, ["--no-progress"]),  # warnings and errors
])
def test_entrypoint_flags_say_what_submit_was_asked_for(verbose, quiet, flags):
    assert verbosity.entrypoint_flags(verbose, quiet) == flags


@pytest.mark.parametrize("verbose, quiet, level", [
    (0, False, verbosity.DEFAULT), (1, False, verbosity.VERBOSE), (3, False, verbosity.VERBOSE),
    (0, True, verbosity.QUIET), (2, True, verbosity.QUIET),
])
def test_the_command_lines_flags_map_to_one_level(verbose, quiet, level):
    assert output_level(verbose, quiet) == level
