"""checkpoint.py: atomic writes, the pointer, pruning, clear errors for bad files."""
from __future__ import annotations

import random

import pytest
import torch

from mpirun_kit.maskrcnn.checkpoint import (CheckpointError, capture_rng, find_last, load_checkpoint, restore_rng,
                                            save_checkpoint)


def _state(step):
    return {"model": {"w": torch.full((2,), float(step))}, "optimizer": {}, "scheduler": {}, "sampler": {},
            "rng": [], "step": step, "config": {}}


def test_save_points_at_newest_and_keeps_the_previous(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, _state(step), keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last_checkpoint", "model_0000020.pth", "model_0000030.pth"]
    last = find_last(tmp_path)
    assert last.name == "model_0000030.pth" and load_checkpoint(last)["step"] == 30
    assert not list(tmp_path.glob("*.tmp"))


def test_a_failed_write_leaves_the_old_checkpoint_and_no_temp_file(tmp_path):
    save_checkpoint(tmp_path, _state(10))

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("disk full (simulated by a state that cannot be serialised)")

    with pytest.raises(RuntimeError):
        save_checkpoint(tmp_path, dict(_state(20), model=Unpicklable()))
    assert find_last(tmp_path).name == "model_0000010.pth"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last_checkpoint", "model_0000010.pth"]


def test_no_checkpoint_yet_is_none(tmp_path):
    assert find_last(tmp_path) is None


def test_errors_name_the_file(tmp_path):
    (tmp_path / "last_checkpoint").write_text("model_0000099.pth\n")
    with pytest.raises(CheckpointError, match=r"last_checkpoint names model_0000099.pth, which does not exist"):
        find_last(tmp_path)
    (tmp_path / "bad.pth").write_bytes(b"\x00 truncated")
    with pytest.raises(CheckpointError, match=r"checkpoint .*bad.pth could not be read .*it is corrupt"):
        load_checkpoint(tmp_path / "bad.pth")
    torch.save({"model": {}}, tmp_path / "partial.pth")
    with pytest.raises(CheckpointError, match=r"partial.pth lacks optimizer, scheduler, sampler, rng, step, config"):
        load_checkpoint(tmp_path / "partial.pth")
    with pytest.raises(CheckpointError, match=r"checkpoint .*none.pth does not exist"):
        load_checkpoint(tmp_path / "none.pth")


def test_rng_round_trip():
    state = capture_rng()
    a = (random.random(), torch.rand(3))
    restore_rng(state)
    b = (random.random(), torch.rand(3))
    assert a[0] == b[0] and torch.equal(a[1], b[1])
