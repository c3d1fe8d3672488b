"""Registration of the compiled ops: torch.library.opcheck on every op, and tracing.

opcheck verifies each schema against its kernels (mutation and aliasing), that
the fake kernels in ops/_meta.py produce the shapes, dtypes and strides of the
real ones, that autograd is registered where an op is differentiable, and that
AOT dispatch works with dynamic shapes: what torch.compile needs.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from mpirun_kit.maskrcnn import ops
from mpirun_kit.maskrcnn.ops import _autocast, reference

from ops_inputs import rand_boxes, rand_rois

pytestmark = pytest.mark.usefixtures("compiled")

CASE_NAMES = [
    "nms", "batched_nms", "box_iou", "encode_boxes", "decode_boxes", "grid_anchors", "roi_align",
    "roi_align_channels_last", "_roi_align_backward", "generate_proposals", "generate_proposals_levels",
    "generate_proposals_padded", "generate_proposals_padded_levels",
]


def _cases(g):
    M = torch.ops.mpirun_kit  # resolved after the `compiled` fixture has loaded the library
    boxes = rand_boxes(g, 30)
    scores = torch.rand(30, generator=g)
    idxs = torch.randint(0, 3, (30,), generator=g)
    inp = torch.randn(2, 3, 8, 9, generator=g, requires_grad=True)
    inp_cl = torch.randn(2, 3, 8, 9, generator=g).contiguous(memory_format=torch.channels_last).requires_grad_(True)
    rois = rand_rois(g, 5, 2, 8.0)
    cell = reference.cell_anchors((32,), (0.5, 1.0, 2.0))
    anchors = reference.grid_anchors(cell, 4, 5, 8)
    obj = torch.randn(2, anchors.shape[0], generator=g)
    deltas = torch.randn(2, anchors.shape[0], 4, generator=g) * 0.2
    sizes = torch.tensor([[32.0, 40.0], [30.0, 33.0]])
    levels = torch.arange(anchors.shape[0]) % 2
    grad = torch.randn(5, 3, 2, 2, generator=g)
    return [
        ("nms", M.nms, (boxes, scores, 0.5)),
        ("batched_nms", M.batched_nms, (boxes, scores, idxs, 0.5)),
        ("box_iou", M.box_iou, (boxes, boxes[:7])),
        ("encode_boxes", M.encode_boxes, (boxes, boxes.flip(0), [10.0, 10.0, 5.0, 5.0])),
        ("decode_boxes", M.decode_boxes, (torch.randn(30, 8, generator=g), boxes, [1.0, 1.0, 1.0, 1.0], 4.0)),
        ("grid_anchors", M.grid_anchors, (cell, 4, 5, 8)),
        ("roi_align", M.roi_align, (inp, rois, 0.5, 2, 2, 2, True)),
        ("roi_align_channels_last", M.roi_align, (inp_cl, rois, 0.5, 2, 2, 0, False)),
        ("_roi_align_backward", M._roi_align_backward, (grad, rois, 0.5, 2, 2, 2, 3, 8, 9, 2, True)),
        ("generate_proposals", M.generate_proposals, (anchors, obj, deltas, sizes, None, 20, 10, 0.7, 1.0, [1.0] * 4, 4.0)),
        ("generate_proposals_levels", M.generate_proposals, (anchors, obj, deltas, sizes, levels, 20, 10, 0.7, 1.0, [1.0] * 4, 4.0)),
        ("generate_proposals_padded", M.generate_proposals_padded, (anchors, obj, deltas, sizes, [], 20, 10, 0.7, 1.0, [1.0] * 4, 4.0)),
        ("generate_proposals_padded_levels", M.generate_proposals_padded,
         (anchors, obj, deltas, sizes, [anchors.shape[0] // 2, anchors.shape[0] - anchors.shape[0] // 2], 20, 10, 0.7, 1.0, [1.0] * 4, 4.0)),
    ]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_opcheck(gen, name):
    (_, op, args), = [c for c in _cases(gen) if c[0] == name]
    results = torch.library.opcheck(op, args)
    # opcheck raises on the first failing check; the result names each check that ran.
    assert set(results) >= {"test_schema", "test_faketensor"}, results
    assert set(results.values()) == {"SUCCESS"}, results


def test_every_schema_is_tested():
    import torch._C

    defined = {name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names() if name.startswith("mpirun_kit::")}
    defined -= set(_autocast.TENSORLESS_OPS)  # no tensor in or out: nothing for opcheck to check
    covered = {name.removesuffix("_channels_last").removesuffix("_levels") for name in CASE_NAMES}
    assert defined, "no mpirun_kit ops registered"
    assert defined == covered, f"ops without an opcheck case: {sorted(defined - covered)}; stale cases: {sorted(covered - defined)}"


CSRC = Path(ops.__file__).resolve().parents[1] / "csrc" / "ops"


def _impls(pattern: str) -> set[str]:
    """Op names given a kernel by the TORCH_LIBRARY_IMPL blocks of the matching source files."""
    return {m for f in CSRC.glob(pattern) for m in re.findall(r'm\.impl\("(\w+)"', f.read_text())}


def test_every_op_has_a_kernel_per_backend():
    cpu, cuda = _impls("cpu/*_kernel.cpp"), _impls("cuda/*_kernel.cu")
    assert len(cpu) >= 9 and cpu == cuda, f"CPU only: {sorted(cpu - cuda)}; CUDA only: {sorted(cuda - cpu)}"
    for name in cpu:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"mpirun_kit::{name}", "CPU"), name
    if torch.cuda.is_available():  # setup.py builds the CUDA kernels where torch sees a GPU
        missing = [n for n in sorted(cuda) if not torch._C._dispatch_has_kernel_for_dispatch_key(f"mpirun_kit::{n}", "CUDA")]
        assert not missing, f"built without CUDA kernels for {missing}: rebuild with FORCE_CUDA=1 and nvcc on PATH"


def test_roi_align_traces_under_torch_compile(gen):
    inp = torch.randn(1, 4, 10, 10, generator=gen, requires_grad=True)
    rois = rand_rois(gen, 6, 1, 10.0)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def pooled(x, r):
        return ops.roi_align(x, r, 3, 1.0, 2, True).relu().sum()

    ops.roi_align(inp, rois, 3, 1.0, 2, True)  # eager first: the backend decision is made (and cached) outside tracing

    out = pooled(inp, rois)
    out.backward()
    torch.testing.assert_close(out, reference.roi_align(inp, rois, (3, 3), 1.0, 2, True).relu().sum())
    assert inp.grad is not None and inp.grad.abs().sum() > 0
