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


@pytest.mark.parametrize(("h", "w", "k"), [(6, 7, 40), (40, 48, 3)])
@pytest.mark.parametrize("c", [3, 19])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_cpu_backward_both_algorithms_match_the_reference(gen, h, w, k, c, sampling_ratio):
    """Issue #32: the NCHW backward picks by work -- many samples for the map (40 RoIs on 6x7) take
    the channels-last algorithm on transposed copies, few (3 RoIs on 40x48) the NCHW channel blocks
    (19 channels: two full blocks of 8 and a partial one).  Both against the pure-PyTorch reference."""
    from mpirun_kit.maskrcnn.ops import reference
    from ops_inputs import rand_rois

    x = torch.randn(2, c, h, w, generator=gen, dtype=torch.float64, requires_grad=True)
    rois = rand_rois(gen, k, 2, float(max(h, w)), torch.float64)
    out = reference.roi_align(x, rois, (2, 2), 0.8, sampling_ratio, True)
    upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    (want,) = torch.autograd.grad(out, x, upstream)
    got = torch.ops.mpirun_kit._roi_align_backward(upstream, rois, 0.8, 2, 2, 2, c, h, w, sampling_ratio, True)
    assert got.is_contiguous()  # NCHW in, NCHW out, whichever algorithm ran
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
