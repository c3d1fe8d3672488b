"""The ops' float32 autocast rule (ops/_autocast.py), on CPU autocast with bfloat16.

The rule is registered at the op (torch.library.register_autocast), so a direct
``torch.ops.mpirun_kit.*`` call follows it as well as the wrappers; the reference
fallback applies it by hand.  CPU autocast runs the same dispatcher path as CUDA
autocast (AutocastCPU vs AutocastCUDA key), so this runs here without a GPU.
"""
from __future__ import annotations

import contextlib

import pytest
import torch

from mpirun_kit.maskrcnn import ops
from mpirun_kit.maskrcnn.ops import _autocast, _loader, reference

from ops_inputs import rand_boxes, rand_rois

BF16 = torch.bfloat16


def _amp():
    return torch.autocast("cpu", dtype=BF16)


@pytest.mark.usefixtures("compiled")
def test_every_op_has_an_autocast_rule_for_cpu_and_cuda():
    for op in _autocast.FP32_OPS:
        for key in ("AutocastCPU", "AutocastCUDA"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"mpirun_kit::{op}", key), (op, key)
    # and the list is every tensor op of the library (a new op must get a rule)
    schemas = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("mpirun_kit::")}
    assert schemas - set(_autocast.TENSORLESS_OPS) == set(_autocast.FP32_OPS)
    assert set(_autocast.TENSORLESS_OPS) <= schemas, "a listed tensorless op is not in the library"


@pytest.mark.usefixtures("compiled")
def test_direct_op_call_under_autocast_returns_float32(gen):
    feats = torch.randn(2, 4, 12, 12, generator=gen).to(BF16)
    rois = rand_rois(gen, 6, 2, 12.0)
    with _amp():
        out = torch.ops.mpirun_kit.roi_align(feats, rois, 1.0, 3, 3, 2, True)
    assert out.dtype == torch.float32
    expected = reference.roi_align(feats.float(), rois, (3, 3), 1.0, 2, True)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_wrappers_under_autocast_take_bf16_and_return_float32(gen, tmp_path, backend):
    """Before the rule: OpInputError (bfloat16 is no CPU kernel dtype; rois/input dtypes differ)."""
    loader = _loader.active() if backend == "compiled" else _loader.ExtensionLoader(tmp_path / "missing.so")
    if backend == "compiled" and not loader.available:
        pytest.fail(f"compiled detection ops unavailable: {loader.load()}")
    feats = torch.randn(2, 4, 12, 12, generator=gen).to(BF16).requires_grad_(True)
    rois = rand_rois(gen, 6, 2, 12.0)
    boxes = rand_boxes(gen, 20)
    scores = torch.rand(20, generator=gen).to(BF16)
    cell = reference.cell_anchors((32,), (0.5, 1.0, 2.0))
    anchors = reference.grid_anchors(cell, 4, 5, 8)
    obj = torch.randn(2, anchors.shape[0], generator=gen).to(BF16)
    deltas = (torch.randn(2, anchors.shape[0], 4, generator=gen) * 0.2).to(BF16)
    with _loader.using(loader), pytest.warns(ops.OpsFallbackWarning) if backend == "reference" else contextlib.nullcontext(), _amp():
        pooled = ops.roi_align(feats, rois, 3, 1.0, 2, True)
        keep = ops.nms(boxes, scores, 0.5)
        iou = ops.box_iou(boxes.to(BF16), boxes)
        dec = ops.decode_boxes(deltas[0], anchors)
        pb, ps, valid = ops.generate_proposals_padded(anchors, obj, deltas, [(32, 40), (30, 33)], ops.ProposalParams(20, 10, 0.7, 1.0),
                                                      level_sizes=[30, 30])
    assert pooled.dtype == iou.dtype == dec.dtype == pb.dtype == ps.dtype == torch.float32
    torch.testing.assert_close(pooled, reference.roi_align(feats.detach().float(), rois, (3, 3), 1.0, 2, True))
    torch.testing.assert_close(keep, reference.nms(boxes, scores.float(), 0.5))
    torch.testing.assert_close(dec, reference.decode_boxes(deltas[0].float(), anchors))
    # autograd casts the float32 gradient back to the features' dtype
    pooled.sum().backward()
    assert feats.grad is not None and feats.grad.dtype == BF16


@pytest.mark.usefixtures("compiled")
def test_packed_pooler_under_autocast_builds_a_float32_canvas(gen):
    """The canvas is packed in the dtype RoIAlign computes in, once for every roi_align that reads it."""
    feats = [torch.randn(1, 4, s, s, generator=gen).to(BF16).requires_grad_(True) for s in (16, 8, 4, 2)]
    rois = torch.tensor([[0.0, 4.0, 4.0, 40.0, 36.0], [0.0, 1.0, 2.0, 60.0, 63.0]])
    with _amp():
        canvas, origins = ops.pack_levels(feats)
        out = ops.roi_align_packed(canvas, origins, rois, 2, 2, [4, 8, 16, 32])
    assert canvas.dtype == out.dtype == torch.float32
    out.sum().backward()
    assert all(f.grad is not None and f.grad.dtype == BF16 for f in feats)


def test_mismatched_dtypes_outside_autocast_are_still_refused(gen):
    feats = torch.randn(2, 4, 12, 12, generator=gen)
    rois = rand_rois(gen, 3, 2, 12.0).double()
    with pytest.raises(ops.OpInputError, match=r"rois must have the dtype of input \(torch.float32\), got torch.float64"):
        ops.roi_align(feats, rois, 3)
    with pytest.raises(ops.OpInputError, match="input has dtype torch.bfloat16, which the cpu kernels do not support"):
        ops.roi_align(feats.to(BF16), rois.to(BF16), 3)
