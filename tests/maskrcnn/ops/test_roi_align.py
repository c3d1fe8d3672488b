"""ops/roi_align.py on the meta device: the packed pooler picks pinned host memory only for CUDA."""
from __future__ import annotations

import pytest
import torch

from mpirun_kit.maskrcnn import ops

pytestmark = pytest.mark.usefixtures("compiled")


def test_packed_pooler_runs_on_the_meta_device():
    """Before: RuntimeError from pin_memory() (chosen by device.type != "cpu"; meta has no pinned memory)."""
    feats = [torch.empty(2, 4, s, s + 1, device="meta") for s in (16, 8, 4, 2)]
    rois = torch.empty(7, 5, device="meta")
    out = ops.multiscale_roi_align_packed(feats, rois, 3, 2, [4, 8, 16, 32])
    assert out.device.type == "meta" and out.shape == (7, 4, 3, 3)


def test_packed_pooler_backward_on_the_meta_device():
    feats = [torch.empty(2, 4, s, s, device="meta", requires_grad=True) for s in (16, 8, 4, 2)]
    out = ops.multiscale_roi_align_packed(feats, torch.empty(5, 5, device="meta"), 2, 2, [4, 8, 16, 32])
    out.sum().backward()
    assert [f.grad.shape for f in feats] == [f.shape for f in feats]


def test_cpu_backward_is_bitwise_repeatable_in_deterministic_mode(gen):
    """The CPU kernel splits the backward by channel ranges (no two threads add into one cell), so
    it is deterministic in both modes: the same bits as with torch.use_deterministic_algorithms(True)."""
    from ops_inputs import rand_rois

    grad = torch.randn(200, 6, 7, 7, generator=gen)
    rois = rand_rois(gen, 200, 2, 30.0)
    args = (rois, 0.5, 7, 7, 2, 6, 30, 33, 2, True)
    default = torch.ops.mpirun_kit._roi_align_backward(grad, *args)
    torch.use_deterministic_algorithms(True)
    try:
        first = torch.ops.mpirun_kit._roi_align_backward(grad, *args)
        second = torch.ops.mpirun_kit._roi_align_backward(grad, *args)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(first, second) and torch.equal(first, default)


def test_cpu_bad_batch_index_names_the_rule(gen):
    x = torch.randn(2, 3, 8, 8)
    rois = torch.tensor([[0.0, 1, 1, 5, 5], [2.0, 1, 1, 5, 5]])
    with pytest.raises(ops.OpInputError, match=r"rois\[:, 0\] must be batch indices in \[0, 1\], got values in \[0, 2\]"):
        ops.roi_align(x, rois, 2)
    with pytest.raises(RuntimeError, match=r"rois\[:, 0\] must be batch indices in \[0, 1\]"):
        torch.ops.mpirun_kit._roi_align_backward(torch.ones(2, 3, 2, 2), rois, 1.0, 2, 2, 2, 3, 8, 8, 2, True)
