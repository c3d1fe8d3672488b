"""The pure-PyTorch references against independent, obviously-correct oracles.

The references are the fallback and the oracle for the compiled kernels, so they
are checked here against scalar transcriptions of the published algorithms
(Detectron/torchvision RoIAlign, greedy NMS) and against known values
(torchvision's anchors), on fresh random inputs.  No compiled code runs here.
"""
from __future__ import annotations

import math

import pytest
import torch

from mpirun_kit.maskrcnn.ops import reference
from mpirun_kit.maskrcnn.ops.proposals import ProposalParams

from ops_inputs import rand_boxes, rand_rois


def naive_roi_align(inp, rois, ph, pw, scale, sampling_ratio, aligned):
    """Scalar loops, one sample at a time: torchvision's roi_align_kernel.cpp in Python."""
    n, c, h, w = inp.shape
    out = torch.zeros(rois.shape[0], c, ph, pw, dtype=inp.dtype)

    def bilinear(plane, y, x):
        if y < -1.0 or y > h or x < -1.0 or x > w:
            return 0.0
        y, x = max(y, 0.0), max(x, 0.0)
        yl, xl = int(y), int(x)
        if yl >= h - 1:
            yh = yl = h - 1
            y = float(yl)
        else:
            yh = yl + 1
        if xl >= w - 1:
            xh = xl = w - 1
            x = float(xl)
        else:
            xh = xl + 1
        ly, lx = y - yl, x - xl
        hy, hx = 1 - ly, 1 - lx
        return hy * hx * plane[yl][xl] + hy * lx * plane[yl][xh] + ly * hx * plane[yh][xl] + ly * lx * plane[yh][xh]

    for k, r in enumerate(rois.tolist()):
        off = 0.5 if aligned else 0.0
        x1, y1, x2, y2 = (v * scale - off for v in r[1:])
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / ph)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / pw)
        count = max(gh * gw, 1)
        for ch in range(c):
            plane = inp[int(r[0]), ch].tolist()
            for i in range(ph):
                for j in range(pw):
                    acc = 0.0
                    for iy in range(gh):
                        y = y1 + i * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            x = x1 + j * bw + (ix + 0.5) * bw / gw
                            acc += bilinear(plane, y, x)
                    out[k, ch, i, j] = acc / count
    return out


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_reference_matches_scalar_algorithm(gen, aligned, sampling_ratio):
    inp = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64)
    rois = rand_rois(gen, 6, 2, 10.0, torch.float64)
    rois[0, 1:] = torch.tensor([3.0, 3.0, 3.0, 3.0], dtype=torch.float64)  # zero-area RoI
    rois[1, 1:] = torch.tensor([-30.0, -30.0, -20.0, -20.0], dtype=torch.float64)  # wholly outside the map
    got = reference.roi_align(inp, rois, (3, 4), 0.8, sampling_ratio, aligned)
    want = naive_roi_align(inp, rois, 3, 4, 0.8, sampling_ratio, aligned)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_roi_align_reference_outside_rois_are_zero_and_empty_rois_give_empty_output(gen):
    inp = torch.randn(1, 2, 5, 5, generator=gen, dtype=torch.float64)
    far = torch.tensor([[0, 100.0, 100.0, 120.0, 120.0]], dtype=torch.float64)
    assert torch.count_nonzero(reference.roi_align(inp, far, (2, 2), 1.0, 2, True)) == 0
    assert reference.roi_align(inp, far[:0], (2, 2), 1.0, 2, True).shape == (0, 2, 2, 2)


def brute_force_nms(boxes, scores, thr, idxs=None):
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    keep = []
    for i in order:
        ok = True
        for j in keep:
            if idxs is not None and int(idxs[i]) != int(idxs[j]):
                continue
            if float(reference.box_iou(boxes[i : i + 1], boxes[j : j + 1])[0, 0]) > thr:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


@pytest.mark.parametrize("thr", [0.3, 0.7])
def test_nms_reference_matches_brute_force(gen, thr):
    boxes = rand_boxes(gen, 60, size=60.0, dtype=torch.float64)
    scores = torch.rand(60, generator=gen, dtype=torch.float64)
    idxs = torch.randint(0, 3, (60,), generator=gen)
    assert reference.nms(boxes, scores, thr).tolist() == brute_force_nms(boxes, scores, thr)
    assert reference.batched_nms(boxes, scores, idxs, thr).tolist() == brute_force_nms(boxes, scores, thr, idxs)


def test_box_coder_reference_round_trips(gen):
    # Sizes 1..41 px: a gt/proposal size ratio stays below exp(DEFAULT_CLIP) = 62.5, where decoding
    # does not clip dw/dh (rand_boxes' 0.5 px minimum allowed 81x, which CI's seed 1018767477 drew).
    props = rand_boxes(gen, 50, dtype=torch.float64, max_wh=40.0) + torch.tensor([0.0, 0, 0.5, 0.5], dtype=torch.float64)
    gt = rand_boxes(gen, 50, dtype=torch.float64, max_wh=40.0) + torch.tensor([0.0, 0, 0.5, 0.5], dtype=torch.float64)
    w = (10.0, 10.0, 5.0, 5.0)
    deltas = reference.encode_boxes(gt, props, w)
    assert float((deltas[:, 2:] / 5.0).abs().max()) < reference.DEFAULT_CLIP  # the case this test is about
    torch.testing.assert_close(reference.decode_boxes(deltas, props, w), gt)


def test_decode_reference_clips_dw_dh_before_exp():
    box = torch.tensor([[0.0, 0.0, 10.0, 10.0]], dtype=torch.float64)
    huge = torch.tensor([[0.0, 0.0, 50.0, 50.0]], dtype=torch.float64)
    out = reference.decode_boxes(huge, box, (1.0, 1.0, 1.0, 1.0), math.log(1000.0 / 16))
    torch.testing.assert_close(out[0, 2] - out[0, 0], torch.tensor(10.0 * 1000.0 / 16, dtype=torch.float64))


def test_cell_anchors_are_torchvisions():
    # torchvision AnchorGenerator(sizes=((32,),), aspect_ratios=((0.5, 1.0, 2.0),)).cell_anchors[0]
    want = torch.tensor([[-23.0, -11.0, 23.0, 11.0], [-16.0, -16.0, 16.0, 16.0], [-11.0, -23.0, 11.0, 23.0]])
    torch.testing.assert_close(reference.cell_anchors((32,), (0.5, 1.0, 2.0)), want)


def test_grid_anchors_order_is_row_major_with_anchors_innermost():
    cell = torch.tensor([[-1.0, -1.0, 1.0, 1.0], [-2.0, -2.0, 2.0, 2.0]])
    got = reference.grid_anchors(cell, 2, 3, 4)
    assert got.shape == (12, 4)
    # location (y=1, x=2) is row 1*3 + 2 = 5; its second anchor is row 11
    torch.testing.assert_close(got[11], torch.tensor([8.0 - 2, 4.0 - 2, 8.0 + 2, 4.0 + 2]))


def test_fpn_levels_follow_eq1():
    rois = torch.tensor([[0, 0, 0, 224, 224], [0, 0, 0, 112, 112], [0, 0, 0, 10, 10], [0, 0, 0, 2000, 2000], [0, 5, 5, 5, 5]], dtype=torch.float32)
    # 224 -> level 4, 112 -> 3, tiny -> clamp to 2, huge -> clamp to 5, zero area -> 2
    assert reference.fpn_levels(rois, 4).tolist() == [2, 1, 0, 3, 0]


def test_generate_proposals_reference_steps(gen):
    anchors = torch.tensor([[0, 0, 10, 10], [0, 0, 10.5, 10], [20, 20, 30, 30], [0, 0, 0.5, 0.5]], dtype=torch.float64)
    obj = torch.tensor([[0.9, 0.8, 0.1, 0.95]], dtype=torch.float64)
    deltas = torch.zeros(1, 4, 4, dtype=torch.float64)
    boxes, scores = reference.generate_proposals(anchors, obj, deltas, [(25, 25)], ProposalParams(10, 10, 0.5, 1.0))
    # anchor 3 is too small; anchor 1 overlaps anchor 0 (IoU 0.95) and scores lower; anchor 2 is clipped to 25
    assert scores[0].tolist() == [0.9, 0.1]
    torch.testing.assert_close(boxes[0], torch.tensor([[0, 0, 10, 10], [20, 20, 25, 25]], dtype=torch.float64))
