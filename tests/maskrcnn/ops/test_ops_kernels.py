"""Compiled CPU kernels (torch.ops.mpirun_kit.*) against the pure-PyTorch references.

Fresh random inputs every run (seed printed by the ``gen`` fixture), plus the
edge cases the kernels must agree on: empty inputs, one box, all-identical
boxes, boxes outside the map, zero-area RoIs, ``aligned`` both ways,
adaptive and fixed sampling, float32 and float64, NCHW and channels-last.
The kernels and the references compute IoU in the same order of operations, so
NMS results must be identical, not just close.
"""
from __future__ import annotations

import pytest
import torch

from mpirun_kit.maskrcnn import ops
from mpirun_kit.maskrcnn.ops import reference

from ops_inputs import rand_boxes, rand_rois

pytestmark = pytest.mark.usefixtures("compiled")

DTYPES = [torch.float32, torch.float64]
NMS = torch.ops.mpirun_kit


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}


# ------------------------------------------------------------------- nms
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 600])
@pytest.mark.parametrize("thr", [0.3, 0.7])
def test_nms_matches_reference(gen, dtype, n, thr):
    boxes = rand_boxes(gen, n, size=200.0, dtype=dtype)
    scores = torch.rand(n, generator=gen, dtype=torch.float64).to(dtype)
    got = NMS.nms(boxes, scores, thr)
    assert got.dtype == torch.int64
    assert torch.equal(got, reference.nms(boxes, scores, thr))


@pytest.mark.parametrize("layout", ["spread", "clustered", "mixed_sizes", "malformed"])
def test_nms_grid_path_matches_reference(gen, layout):
    # >= 2048 boxes: the CPU kernel switches to its grid index (cpu/nms_impl.h), which must not change the result
    n = 2500
    if layout == "spread":
        boxes = rand_boxes(gen, n, size=2000.0)
    elif layout == "clustered":
        boxes = rand_boxes(gen, n, size=60.0, max_wh=30.0)
    elif layout == "mixed_sizes":
        boxes = torch.cat([rand_boxes(gen, n - 40, size=1000.0), rand_boxes(gen, 40, size=300.0, max_wh=900.0)])
    else:
        boxes = rand_boxes(gen, n, size=1000.0)
        boxes[::7] = boxes[::7][:, [2, 3, 0, 1]]  # x2 < x1: negative-area boxes
    scores = torch.rand(n, generator=gen)
    for thr in (0.0, 0.5, -0.1):
        assert torch.equal(NMS.nms(boxes, scores, thr), reference.nms(boxes, scores, thr)), f"{layout} thr={thr}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_nms_identical_boxes_and_ties(gen, dtype):
    boxes = rand_boxes(gen, 1, dtype=dtype).repeat(20, 1)
    scores = torch.ones(20, dtype=dtype)
    assert NMS.nms(boxes, scores, 0.5).tolist() == [0]  # ties: the lowest index wins
    # zero-area identical boxes: IoU is 0/0 = NaN, which never suppresses
    flat = torch.tensor([[5.0, 5.0, 5.0, 9.0]], dtype=dtype).repeat(4, 1)
    assert NMS.nms(flat, torch.arange(4, dtype=dtype), 0.5).tolist() == [3, 2, 1, 0]
    assert torch.equal(NMS.nms(flat, torch.arange(4, dtype=dtype), 0.5), reference.nms(flat, torch.arange(4, dtype=dtype), 0.5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 900])
def test_batched_nms_matches_reference(gen, dtype, n):
    boxes = rand_boxes(gen, n, size=150.0, dtype=dtype)
    scores = torch.rand(n, generator=gen, dtype=torch.float64).to(dtype)
    idxs = torch.randint(-2, 5, (n,), generator=gen)
    got = NMS.batched_nms(boxes, scores, idxs, 0.5)
    assert torch.equal(got, reference.batched_nms(boxes, scores, idxs, 0.5))
    # the public wrapper takes any integer dtype for idxs
    assert torch.equal(ops.batched_nms(boxes, scores, idxs.to(torch.int32), 0.5), got)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["classes", "one_group", "ties", "malformed"])
def test_batched_nms_max_keep_is_the_head_of_the_full_result(gen, dtype, layout):
    """max_keep returns the first max_keep of what NMS keeps (the box head's top-100 after NMS),
    found by the CPU kernel without running NMS over every box (cpu/nms_impl.h, nms_rows_top)."""
    n = 3000  # past 2,048: the full run takes the grid path, the limited one never does
    boxes = rand_boxes(gen, n, size=300.0, dtype=dtype)
    scores = torch.rand(n, generator=gen, dtype=torch.float64).to(dtype)
    idxs = torch.randint(0, 80, (n,), generator=gen)
    if layout == "one_group":
        idxs.zero_()
    elif layout == "ties":
        scores = (scores * 4).floor()  # ties broken by index, as the full run does
        boxes[100:200] = boxes[0]  # identical boxes in one class: the lowest index wins
        idxs[100:200] = idxs[0]
    elif layout == "malformed":
        boxes[::9] = boxes[::9][:, [2, 3, 0, 1]]  # negative areas
        boxes[5] = torch.tensor([4.0, 4.0, 4.0, 4.0], dtype=dtype)  # zero area: IoU NaN never suppresses
    full = NMS.batched_nms(boxes, scores, idxs, 0.5)
    for k in (0, 1, 100, len(full) - 1, len(full), len(full) + 5, n, n + 1):
        got = NMS.batched_nms(boxes, scores, idxs, 0.5, k)
        assert torch.equal(got, full[:k]), f"max_keep={k}"
        assert torch.equal(ops.batched_nms(boxes, scores, idxs, 0.5, max_keep=k), got)
    assert torch.equal(NMS.batched_nms(boxes, scores, idxs, 0.5, -1), full)
    # the full result is the reference's (its greedy NMS in Python is the slow part: called once)
    ref = reference.batched_nms(boxes, scores, idxs, 0.5)
    assert torch.equal(ref, full)
    few = (boxes[:200], scores[:200], idxs[:200], 0.5)
    assert torch.equal(reference.batched_nms(*few, 5), reference.batched_nms(*few)[:5])


# ----------------------------------------------------------- box ops
@pytest.mark.parametrize("dtype", DTYPES)
def test_box_iou_matches_reference(gen, dtype):
    a = rand_boxes(gen, 37, dtype=dtype)
    b = rand_boxes(gen, 23, dtype=dtype)
    b[0] = torch.tensor([3.0, 3.0, 3.0, 3.0])  # zero area
    a[0] = torch.tensor([3.0, 3.0, 3.0, 3.0])  # zero area with zero area: NaN
    torch.testing.assert_close(NMS.box_iou(a, b), reference.box_iou(a, b), equal_nan=True, **tol(dtype))
    assert NMS.box_iou(a[:0], b).shape == (0, 23)


@pytest.mark.parametrize("dtype", DTYPES)
def test_encode_decode_match_reference(gen, dtype):
    props = rand_boxes(gen, 64, dtype=dtype)
    gt = rand_boxes(gen, 64, dtype=dtype)
    w = [10.0, 10.0, 5.0, 5.0]
    torch.testing.assert_close(NMS.encode_boxes(gt, props, w), reference.encode_boxes(gt, props, w), **tol(dtype))
    deltas = torch.randn(64, 12, generator=gen, dtype=torch.float64).to(dtype) * 3  # 3 classes; some dw hit the clip
    got = NMS.decode_boxes(deltas, props, w, reference.DEFAULT_CLIP)
    torch.testing.assert_close(got, reference.decode_boxes(deltas, props, w), **tol(dtype))
    assert NMS.decode_boxes(deltas[:0], props[:0], w, 1.0).shape == (0, 12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 37, 1000, 20_011])
def test_decode_matches_reference_at_every_length(gen, dtype, k, n):
    # float32 with one class runs 8 rows at a time (AVX2) plus a scalar tail, split across
    # threads for the larger n: lengths around and far from a multiple of 8 cover both loops
    props = rand_boxes(gen, n, dtype=dtype)
    deltas = torch.randn(n, 4 * k, generator=gen, dtype=torch.float64).to(dtype) * 2
    big = torch.rand(n, 4 * k, generator=gen) < 0.1
    deltas[big] = 12.0  # past the clip: exp must see the clipped value
    if n > 1:
        deltas[n - 1, 2:4] = float("nan")  # NaN stays NaN, as in torch.clamp (the last row: a tail row at most n)
    w = [10.0, 10.0, 5.0, 5.0] if k > 1 else [1.0, 1.0, 1.0, 1.0]
    got = NMS.decode_boxes(deltas, props, w, reference.DEFAULT_CLIP).reshape(-1, 4)
    want = reference.decode_boxes(deltas, props, w).reshape(-1, 4)
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan) and nan.sum() == (4 if n > 1 else 0)
    # x1 = cx - pw/2 and x2 = cx + pw/2 cancel for a box blown up by exp(clip): their rounding
    # error scales with |x1| + |x2| (>= pw and >= 2|cx|), not with the result, and exp itself
    # may differ by an ulp between implementations (Sleef here, whatever torch picked there)
    sx = want[:, 0::2].abs().sum(1, keepdim=True)
    sy = want[:, 1::2].abs().sum(1, keepdim=True)
    bound = 8 * torch.finfo(dtype).eps * torch.cat((sx, sy, sx, sy), dim=1)
    excess = ((got - want).abs() - bound)[~nan]
    assert excess.numel() == 4 * k * n - nan.sum() and (excess <= 0).all(), \
        f"decode error exceeds 8 ulp of |x1|+|x2| by up to {excess.max().item():.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_generate_anchors_matches_reference(dtype):
    sizes = ((32, 40), (64,), (128,))
    got = ops.generate_anchors([(5, 7), (3, 4), (0, 2)], [4, 8, 16], sizes, (0.5, 1.0, 2.0), "cpu", dtype)
    for lvl, ((h, w), s) in enumerate(zip([(5, 7), (3, 4), (0, 2)], [4, 8, 16])):
        want = reference.grid_anchors(reference.cell_anchors(sizes[lvl], (0.5, 1.0, 2.0), dtype), h, w, s)
        assert torch.equal(got[lvl], want)
    assert got[0].shape == (5 * 7 * 6, 4) and got[2].shape == (0, 4)


# ----------------------------------------------------------- roi_align
def _roi_inputs(gen, dtype, channels_last, n=2, c=5, h=12, w=15):
    inp = torch.randn(n, c, h, w, generator=gen, dtype=torch.float64).to(dtype)
    if channels_last:
        inp = inp.contiguous(memory_format=torch.channels_last)
    rois = rand_rois(gen, 9, n, 14.0, dtype)
    rois[0, 1:] = torch.tensor([4.0, 4.0, 4.0, 4.0])  # zero area
    rois[1, 1:] = torch.tensor([-40.0, -40.0, -30.0, -30.0])  # wholly outside the map
    rois[2, 1:] = torch.tensor([-3.0, 2.0, 30.0, 40.0])  # larger than the map
    return inp, rois


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("channels_last", [False, True])
def test_roi_align_forward_backward_match_reference(gen, dtype, aligned, sampling_ratio, channels_last):
    inp, rois = _roi_inputs(gen, dtype, channels_last)
    x1 = inp.detach().clone().requires_grad_(True)
    x2 = inp.detach().clone().requires_grad_(True)
    got = ops.roi_align(x1, rois, (3, 4), 0.9, sampling_ratio, aligned)
    want = reference.roi_align(x2, rois, (3, 4), 0.9, sampling_ratio, aligned)
    torch.testing.assert_close(got, want, **tol(dtype))
    assert got.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    upstream = torch.randn(got.shape, generator=gen, dtype=torch.float64).to(dtype)
    if channels_last:
        upstream = upstream.contiguous(memory_format=torch.channels_last)  # the backward kernel's NHWC path
    got.backward(upstream)
    want.backward(upstream)
    torch.testing.assert_close(x1.grad, x2.grad, **tol(dtype))
    if channels_last:
        # and the NCHW backward path for a channels-last input
        (g_nchw,) = torch.autograd.grad(ops.roi_align(x1, rois, (3, 4), 0.9, sampling_ratio, aligned), x1, upstream.contiguous())
        torch.testing.assert_close(g_nchw, x2.grad, **tol(dtype))


def test_roi_align_one_and_no_rois(gen):
    inp = torch.randn(1, 3, 6, 6, generator=gen)
    one = torch.tensor([[0, 1.0, 1.0, 4.0, 5.0]])
    torch.testing.assert_close(ops.roi_align(inp, one, 2, 1.0, 0, True), reference.roi_align(inp, one, (2, 2), 1.0, 0, True))
    empty = ops.roi_align(inp.requires_grad_(True), one[:0], 2, 1.0, 0, True)
    assert empty.shape == (0, 3, 2, 2)
    empty.sum().backward()
    assert torch.count_nonzero(inp.grad) == 0


@pytest.mark.parametrize("aligned", [False, True])
def test_roi_align_gradcheck(gen, aligned):
    inp = torch.randn(1, 2, 6, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    rois = rand_rois(gen, 3, 1, 6.0, torch.float64)
    assert torch.autograd.gradcheck(lambda x: ops.roi_align(x, rois, (2, 3), 1.0, 2, aligned), (inp,))


def test_roi_align_double_backward_is_refused(gen):
    inp = torch.randn(1, 2, 6, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 1.0, 1.0, 4.0, 4.0]], dtype=torch.float64)
    out = ops.roi_align(inp, rois, 2, 1.0, 2, True)
    # roi_align is linear in input, so a second derivative only exists with respect to grad_output
    v = torch.randn(out.shape, generator=gen, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(out, inp, grad_outputs=v, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward of mpirun_kit::roi_align is not supported"):
        g.sum().backward()


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_multiscale_roi_align_matches_reference(gen, sampling_ratio):
    feats = [torch.randn(2, 4, 64 // 2**i, 80 // 2**i, generator=gen) for i in range(4)]
    rois = rand_rois(gen, 40, 2, 300.0)
    got = ops.multiscale_roi_align(feats, rois, 7, sampling_ratio, [4, 8, 16, 32])
    want = reference.multiscale_roi_align(feats, rois, (7, 7), sampling_ratio, [4, 8, 16, 32])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ops.MultiScaleRoIAlign(7, sampling_ratio)(feats, rois), got)


# ----------------------------------------------------------- proposals
def _proposal_inputs(gen, dtype, b=2):
    sizes = [(16, 20), (8, 10), (4, 5)]
    anchors = ops.generate_anchors(sizes, [4, 8, 16], ((32,), (64,), (128,)), (0.5, 1.0, 2.0), "cpu", dtype)
    levels = torch.cat([torch.full((len(a),), i) for i, a in enumerate(anchors)])
    anchors = torch.cat(anchors)
    obj = torch.randn(b, anchors.shape[0], generator=gen, dtype=torch.float64).to(dtype)
    deltas = (torch.randn(b, anchors.shape[0], 4, generator=gen, dtype=torch.float64) * 0.3).to(dtype)
    return anchors, obj, deltas, levels


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_level", [False, True])
def test_generate_proposals_matches_reference(gen, dtype, per_level):
    anchors, obj, deltas, levels = _proposal_inputs(gen, dtype)
    lv = levels if per_level else None
    image_sizes = [(64, 80), (50, 61)]
    got_b, got_s = ops.generate_proposals(anchors, obj, deltas, image_sizes, ops.ProposalParams(300, 100, 0.7, 2.0), levels=lv)
    want_b, want_s = reference.generate_proposals(anchors, obj, deltas, image_sizes, ops.ProposalParams(300, 100, 0.7, 2.0), lv)
    assert len(got_b) == 2
    for gb, gs, wb, ws in zip(got_b, got_s, want_b, want_s):
        assert gb.shape[0] <= 100
        torch.testing.assert_close(gs, ws, **tol(dtype))
        torch.testing.assert_close(gb, wb, **tol(dtype))


@pytest.mark.parametrize("per_level", [False, True])
def test_generate_proposals_padded_matches_the_list_op(gen, per_level):
    """The training step's fixed-size variant: image b's proposals in its first slots, zeros after."""
    cell = reference.cell_anchors((16,), (0.5, 1.0, 2.0))
    parts = [reference.grid_anchors(cell, 12, 14, 4), reference.grid_anchors(cell, 6, 7, 8)]
    anchors = torch.cat(parts)
    obj = torch.randn(3, anchors.shape[0], generator=gen)
    deltas = torch.randn(3, anchors.shape[0], 4, generator=gen) * 0.3
    sizes = [(48, 56), (40, 50), (30, 56)]
    level_sizes = [p.shape[0] for p in parts] if per_level else []
    levels = torch.repeat_interleave(torch.arange(2), torch.tensor(level_sizes)) if per_level else None
    boxes, scores, valid = ops.generate_proposals_padded(anchors, obj, deltas, sizes, ops.ProposalParams(80, 300, 0.6, 2.0), level_sizes)
    want_b, want_s = ops.generate_proposals(anchors, obj, deltas, sizes, ops.ProposalParams(80, 300, 0.6, 2.0), levels=levels)
    ref_b, ref_s, ref_v = reference.generate_proposals_padded(anchors, obj, deltas, sizes, ops.ProposalParams(80, 300, 0.6, 2.0), levels)
    assert boxes.shape == (3, 300, 4) and scores.shape == valid.shape == (3, 300)
    torch.testing.assert_close(boxes, ref_b)
    torch.testing.assert_close(valid, ref_v)
    for i in range(3):
        n = want_b[i].shape[0]
        assert 0 < n < 300 and int(valid[i].sum()) == n and bool(valid[i, :n].all())
        torch.testing.assert_close(boxes[i, :n], want_b[i])
        torch.testing.assert_close(scores[i, :n], want_s[i])
        assert not boxes[i, n:].any() and not scores[i, n:].any()


def test_generate_proposals_padded_rejects_level_sizes_that_do_not_add_up(gen):
    anchors = reference.grid_anchors(reference.cell_anchors((16,), (1.0,)), 2, 2, 4)
    with pytest.raises(ops.OpInputError, match=r"level_sizes must be anchor counts >= 0 summing to the rows of anchors \(4\), got \[3, 2\]"):
        ops.generate_proposals_padded(anchors, torch.zeros(1, 4), torch.zeros(1, 4, 4), [(8, 8)], ops.ProposalParams(5, 5, 0.7, 0.0), [3, 2])
    with pytest.raises(RuntimeError, match=r"level_sizes must sum to the rows of anchors \(4\), got \[3, 2\] \(sum 5\)"):
        torch.ops.mpirun_kit.generate_proposals_padded(anchors, torch.zeros(1, 4), torch.zeros(1, 4, 4),
                                                       torch.tensor([[8.0, 8.0]]), [3, 2], 5, 5, 0.7, 0.0, [1.0] * 4, 4.0)


def test_generate_proposals_min_size_can_drop_everything(gen):
    anchors, obj, deltas, _ = _proposal_inputs(gen, torch.float32, b=1)
    boxes, scores = ops.generate_proposals(anchors, obj, deltas, [(64, 80)], ops.ProposalParams(50, 10, 0.7, 1e6))
    assert boxes[0].shape == (0, 4) and scores[0].shape == (0,)


@pytest.mark.parametrize("channels_last", [False, True])
def test_packed_multiscale_roi_align_equals_the_per_level_pooler(gen, channels_last):
    """One roi_align call over the tiled levels == the per-level split, values and gradients,
    for RoIs inside the image (the training step's: proposals and GT are clipped)."""
    n, c, img_h, img_w = 2, 3, 512, 768
    feats = [torch.randn(n, c, img_h // s, img_w // s, generator=gen) for s in (4, 8, 16, 32)]
    if channels_last:
        feats = [f.contiguous(memory_format=torch.channels_last) for f in feats]
    feats = [f.requires_grad_(True) for f in feats]
    xy = torch.rand(200, 2, generator=gen) * torch.tensor([img_w, img_h])
    wh = torch.rand(200, 2, generator=gen) ** 2 * torch.tensor([img_w, img_h])
    b = torch.cat([xy, xy + wh], 1)
    b[:, 0::2] = b[:, 0::2].clamp(0, img_w)
    b[:, 1::2] = b[:, 1::2].clamp(0, img_h)
    b[:4] = torch.tensor([[0.0, 0, 40, 40], [10, 10, 130, 130], [0, 0, 300, 250], [0, 0, img_w, img_h]])  # P2..P5
    rois = torch.cat([torch.randint(0, n, (200, 1), generator=gen).float(), b], 1)
    want = ops.multiscale_roi_align(feats, rois, 7, 2, [4, 8, 16, 32], aligned=True)
    got = ops.multiscale_roi_align_packed(feats, rois, 7, 2, [4, 8, 16, 32])
    assert set(reference.fpn_levels(rois, 4).tolist()) == {0, 1, 2, 3}  # every level is exercised
    # Float rounding, bounded: moving a RoI into its tile adds the tile's origin (up to the canvas
    # size) to each sample coordinate, which float32 keeps to about eps * size; a bilinear sample then
    # moves by that much in x and in y, times the largest step between neighbouring feature pixels.
    # (A fixed 1e-4 failed for 1 value in 29,400 with MRK_OPS_SEED=3671648507: 1.14e-4.)
    canvas, _ = ops.pack_levels([f.detach() for f in feats])
    ulp = torch.finfo(torch.float32).eps * max(canvas.shape[-2:])
    step = max(float(f.detach().diff(dim=d).abs().max()) for f in feats for d in (-1, -2))
    torch.testing.assert_close(got, want, rtol=0, atol=2 * ulp * step)
    g_want = torch.autograd.grad(want.square().sum(), feats)
    g_got = torch.autograd.grad(got.square().sum(), feats)
    for gw, gg in zip(g_want, g_got):
        torch.testing.assert_close(gg, gw, rtol=1e-3, atol=1e-3)


def test_pack_levels_gradcheck_with_one_pixel_maps():
    fs = [torch.randn(2, 3, h, w, dtype=torch.float64, requires_grad=True) for h, w in [(5, 6), (1, 3), (2, 1), (1, 1)]]
    assert torch.autograd.gradcheck(lambda *f: ops.pack_levels(list(f))[0], fs)
    canvas, origins = ops.pack_levels(fs)
    for f, (y, x) in zip(fs, origins):  # interior = the level, border = its edge
        h, w = f.shape[-2:]
        assert torch.equal(canvas[:, :, y:y + h, x:x + w], f)
        assert torch.equal(canvas[:, :, y - 1, x:x + w], f[:, :, 0]) and torch.equal(canvas[:, :, y + h, x - 1], f[:, :, -1, 0])
