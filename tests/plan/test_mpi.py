"""plan/mpi.py: the MPI flavours as data: each row's tag pattern reads back its launcher's tags, byte for byte.

The tags here are the bytes real launchers wrote (Open MPI 4.1 --tag-output, Open MPI 5 --output tag, MPICH
asked for ``[%r]<hydra>:``, srun --label); whole launches through them run in tests/exec/test_output.py and
tests/exec/test_process.py.
"""
from __future__ import annotations

import re

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.plan.mpi import FLAVOURS, get_flavour


@pytest.mark.parametrize("flavour, line, rank, text", [
    ("openmpi4", "[1,3]<stdout>:  indented", "3", "  indented"),      # the program's own spaces kept
    ("openmpi4", "[1,12]<stderr>:\tx", "12", "\tx"),
    ("openmpi5", "[1,3]<stdout>:  indented", "3", " indented"),       # Open MPI 5 adds exactly one space
    ("mpich", "[7]<hydra>:x", "7", "x"),
    ("srun", " 3: x", "3", "x"),
    ("srun", "12: x", "12", "x"),
])
def test_each_tag_pattern_reads_its_launchers_tag_and_leaves_the_text(flavour, line, rank, text):
    m = re.match(get_flavour(flavour).tag_regex, line)
    assert m and m.group("rank") == rank and line[m.end():] == text


@pytest.mark.parametrize("flavour, line", [
    ("openmpi4", "[3] a program's own brackets"),
    ("openmpi5", "[1,3]<stdout>:no space"),
    ("mpich", "[3] hello"),          # MPICH's own -prepend-rank shape: too likely to be a program's text
    ("openmpi4", "x [1,3]<stdout>:"),
])
def test_a_line_that_is_not_its_launchers_tag_is_not_read_as_one(flavour, line):
    assert re.match(get_flavour(flavour).tag_regex, line) is None


def test_every_row_is_whole():
    for name, f in FLAVOURS.items():
        assert f.name == name and f.daemons and f.launcher and f.np_flag and f.hosts_flag
        assert {"rank"} <= set(re.compile(f.tag_regex).groupindex), name
        assert (f.mca_flag is None) == (f.runtime_mca_flag is None), name   # both MCA flags or none
        assert f.uses_ssh == (name != "srun"), name


def test_an_unknown_flavour_names_the_known_ones():
    with pytest.raises(SpecError, match=r"^mpi_flavour 'lam' is unknown; expected one of "
                                        r"\['mpich', 'openmpi4', 'openmpi5', 'srun'\] or 'auto'$"):
        get_flavour("lam")
