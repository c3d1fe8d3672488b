"""write_atomic / write_atomic_with / write_json_atomic (core/files.py): the one atomic write every layer uses."""
from __future__ import annotations

import os
import stat

import pytest

from mpirun_kit.core.files import write_atomic, write_atomic_with, write_json_atomic

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


def test_a_streamed_write_that_fails_midway_keeps_the_old_file(tmp_path):
    """A checkpoint is streamed (torch.save into the file): half of it must never replace the old one."""
    target = tmp_path / "model.pth"
    write_atomic_with(target, lambda f: f.write(b"old checkpoint"))

    def half_then_fail(f):
        f.write(b"half of a new one")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomic_with(target, half_then_fail)
    assert target.read_bytes() == b"old checkpoint"
    assert os.listdir(tmp_path) == ["model.pth"]
    assert write_json_atomic(tmp_path / "m.json", {"b": 1, "a": [2]}, sort_keys=True).read_text() == '{"a": [2], "b": 1}'
