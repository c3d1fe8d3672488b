"""write_atomic (exec/files.py): the one atomic write every layer uses."""
from __future__ import annotations

import os
import stat

import pytest

from mpirun_kit.exec.files import write_atomic

def test_whole_file_with_its_mode_and_nothing_left_beside_it(tmp_path):
    target = tmp_path / "a" / "b" / "failure"
    assert write_atomic(target, "old\n") == target
    write_atomic(target, "new text\n", 0o600)
    assert target.read_text() == "new text\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    write_atomic(target, b"\x00bytes", 0o644)
    assert (target.read_bytes(), stat.S_IMODE(target.stat().st_mode)) == (b"\x00bytes", 0o644)
    assert sorted(p.name for p in target.parent.iterdir()) == ["failure"]

def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    target = tmp_path / "timeline.json"
    write_atomic(target, "old")

    with pytest.raises(TypeError):
        write_atomic(target, 12345)  # not text: the write fails after the temporary file exists
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["timeline.json"]
