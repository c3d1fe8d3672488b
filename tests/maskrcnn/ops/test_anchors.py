"""ops/anchors.py: the cell anchors are copied to a device once, not at every call."""
from __future__ import annotations

import pytest
import torch

from mpirun_kit.maskrcnn import ops

from ops_inputs import HostCopies

pytestmark = pytest.mark.usefixtures("compiled")

ARGS = ([(8, 10), (4, 5)], [4, 8], [(32,), (64,)], (0.5, 1.0, 2.0))


def test_generate_anchors_copies_cell_anchors_to_the_device_once():
    """meta stands in for the GPU.  Before: every call copied each level's cell anchors (2 copies per call)."""
    with HostCopies() as first:
        a = ops.generate_anchors(*ARGS, device="meta")
    with HostCopies() as again:
        b = ops.generate_anchors(*ARGS, device="meta")
    assert [t.shape for t in a] == [t.shape for t in b] == [torch.Size([240, 4]), torch.Size([60, 4])]
    assert all(t.device.type == "meta" for t in a + b)
    assert len(first.copies) <= 2  # one per level at most (none when an earlier test cached them)
    assert again.copies == []


def test_cached_cell_anchors_give_the_same_grid():
    cpu1 = ops.generate_anchors(*ARGS)
    cpu2 = ops.generate_anchors(*ARGS)
    for x, y in zip(cpu1, cpu2):
        torch.testing.assert_close(x, y)
        assert x.data_ptr() != y.data_ptr()  # grids are fresh tensors: callers may not share them by accident
