"""ops/proposals.py: the padded proposal step on the meta device, and no per-call host work of
anchor size (the level index is built on the device, for the reference only, and cached)."""
from __future__ import annotations

import pytest
import torch

from mpirun_kit.maskrcnn import ops
from mpirun_kit.maskrcnn.ops import _loader, proposals

from ops_inputs import HostCopies

LEVELS = [600, 150, 40]
A = sum(LEVELS)


def _inputs(device):
    return (torch.empty(A, 4, device=device), torch.empty(2, A, device=device), torch.empty(2, A, 4, device=device))


@pytest.mark.usefixtures("compiled")
def test_padded_proposals_on_the_meta_device_do_no_host_work_of_anchor_size():
    """Before: pin_memory() on meta failed (chosen by device.type != "cpu"), and every call built a
    host repeat_interleave of A level ids that the compiled kernels never read."""
    with HostCopies() as seen:
        boxes, scores, valid = ops.generate_proposals_padded(*_inputs("meta"), [(64, 80), (60, 70)], ops.ProposalParams(100, 50, 0.7, 0.0),
                                                             level_sizes=LEVELS)
    assert (boxes.shape, scores.shape, valid.shape) == ((2, 50, 4), (2, 50), (2, 50))
    assert boxes.device.type == "meta"
    assert [(op, n) for op, n in seen.host_outputs if n >= A] == []
    assert seen.copies == [("_to_copy", 4)]  # the image sizes: 2 x (h, w)


def test_reference_level_ids_are_built_on_the_device_and_cached():
    with HostCopies() as seen:
        ids = proposals.level_ids(LEVELS, torch.device("meta"))
        again = proposals.level_ids(LEVELS, torch.device("meta"))
    assert again is ids and ids.shape == (A,) and ids.device.type == "meta"
    assert seen.copies == [] and seen.host_outputs == []
    expected = torch.repeat_interleave(torch.arange(3), torch.tensor(LEVELS))
    assert torch.equal(proposals.level_ids(LEVELS, torch.device("cpu")), expected)


def test_reference_padded_proposals_use_the_cached_level_ids(gen, tmp_path, monkeypatch):
    built = []
    real = torch.full
    monkeypatch.setattr(torch, "full", lambda *a, **k: built.append(a[0]) or real(*a, **k))
    proposals._level_ids.clear()
    cell = torch.tensor([[-8.0, -8.0, 8.0, 8.0]])
    anchors = torch.cat([(torch.rand(n, 1, generator=gen) * 50) + cell for n in LEVELS])
    obj = torch.randn(2, A, generator=gen)
    deltas = torch.randn(2, A, 4, generator=gen) * 0.1
    with _loader.using(_loader.ExtensionLoader(tmp_path / "missing.so")), pytest.warns(ops.OpsFallbackWarning):
        first = ops.generate_proposals_padded(anchors, obj, deltas, [(64, 80), (60, 70)], ops.ProposalParams(20, 10, 0.7, 0.0), level_sizes=LEVELS)
        n_built = len(built)
        second = ops.generate_proposals_padded(anchors, obj, deltas, [(64, 80), (60, 70)], ops.ProposalParams(20, 10, 0.7, 0.0), level_sizes=LEVELS)
    assert n_built == len(LEVELS) and len(built) == n_built  # one fill per level, the first call only
    for x, y in zip(first, second):
        assert torch.equal(x, y)
