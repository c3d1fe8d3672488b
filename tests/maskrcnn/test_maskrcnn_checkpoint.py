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


def test_full_rng_state_survives_a_save_and_load(tmp_path):
    """capture_rng() holds only what weights_only loading accepts (numpy's key as a tensor)."""
    import numpy as np

    state = dict(_state(10), rng=[capture_rng()])
    load = load_checkpoint(save_checkpoint(tmp_path, state))
    a = (random.random(), np.random.rand(), torch.rand(3))
    restore_rng(load["rng"][0])
    b = (random.random(), np.random.rand(), torch.rand(3))
    assert a[:2] == b[:2] and torch.equal(a[2], b[2])


class _Planted:
    """A pickle that runs code when unpickled: here it only creates a directory, as proof."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os
        return (os.mkdir, (self.marker,))


def test_a_planted_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "code-ran"
    torch.save(dict(_state(10), config=_Planted(marker)), tmp_path / "model_0000010.pth")
    (tmp_path / "last_checkpoint").write_text("model_0000010.pth\n")
    with pytest.raises(CheckpointError, match=r"model_0000010.pth holds objects other than tensors and plain data "
                                              r"\(.*mkdir.*\); it was not written by this trainer"):
        load_checkpoint(find_last(tmp_path))
    assert not marker.exists()


@pytest.mark.parametrize("pointer", ["/etc/passwd", "../outside/model_0000010.pth", "sub/model_0000010.pth",
                                     "model_0000010.pth.bak", ""])
def test_the_pointer_names_only_a_checkpoint_of_this_directory(tmp_path, pointer):
    (tmp_path / "outside").mkdir()
    torch.save(_state(10), tmp_path / "outside" / "model_0000010.pth")
    out = tmp_path / "out"
    out.mkdir()
    (out / "last_checkpoint").write_text(pointer + "\n")
    with pytest.raises(CheckpointError) as e:
        find_last(out)
    assert str(e.value) == (f"{out / 'last_checkpoint'} holds {pointer!r}; expected the name of a checkpoint in {out},"
                            " like model_0000100.pth (no directory, no ../); delete or fix the pointer file, or pass "
                            "--resume PATH")


def test_a_missing_pointer_target_falls_back_to_the_newest_that_loads(tmp_path, caplog):
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, _state(step), keep=3)
    (tmp_path / "model_0000030.pth").unlink()
    (tmp_path / "model_0000020.pth").write_bytes(b"\x00 truncated by a partial sync")
    assert find_last(tmp_path) == tmp_path / "model_0000010.pth"
    assert "names model_0000030.pth, which does not exist; resuming from" in caplog.text


def test_the_directory_is_fsynced_before_old_checkpoints_are_pruned(tmp_path, monkeypatch):
    """os.fsync and Path.unlink are wrapped (not replaced) to record their order: a directory fsync
    is not observable otherwise without pulling the power."""
    import os
    import stat
    from pathlib import Path

    events = []
    real_fsync, real_unlink = os.fsync, Path.unlink
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("dir-fsync" if stat.S_ISDIR(os.fstat(fd).st_mode)
                                                              else "file-fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: (events.append("unlink " + self.name),
                                                                        real_unlink(self, missing_ok))[1])
    save_checkpoint(tmp_path, _state(10), keep=1)
    events.clear()
    save_checkpoint(tmp_path, _state(20), keep=1)
    assert "unlink model_0000010.pth" in events
    assert "dir-fsync" in events[:events.index("unlink model_0000010.pth")]
