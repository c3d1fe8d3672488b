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
