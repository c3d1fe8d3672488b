"""Mask pasting (modeling/postprocess.py) against grid_sample, the rule it replaced (issue #32)."""
from __future__ import annotations

import torch
from torch.nn import functional as F

from mpirun_kit.maskrcnn.modeling.postprocess import paste_masks, paste_probs


def _grid_sample_paste(masks: torch.Tensor, boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The former paste: a full-size sampling grid per mask, in the box's [-1, 1] frame."""
    ys = torch.arange(height, dtype=torch.float32) + 0.5
    xs = torch.arange(width, dtype=torch.float32) + 0.5
    x0, y0, x1, y1 = (boxes[:, i, None] for i in range(4))
    gx = (xs[None] - x0) / (x1 - x0).clamp(min=1e-6) * 2 - 1
    gy = (ys[None] - y0) / (y1 - y0).clamp(min=1e-6) * 2 - 1
    grid = torch.stack([gx[:, None, :].expand(-1, height, -1), gy[:, :, None].expand(-1, -1, width)], -1)
    return F.grid_sample(masks[:, None], grid, align_corners=False)[:, 0]


def _boxes(g: torch.Generator, n: int, h: int, w: int) -> torch.Tensor:
    """Boxes of every kind: inside, across the edges, sub-pixel, fractional corners."""
    xy = torch.rand(n, 2, generator=g) * torch.tensor([w * 1.2, h * 1.2]) - torch.tensor([w * 0.1, h * 0.1])
    wh = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6]) + 0.3
    b = torch.cat([xy, xy + wh], 1)
    b[0] = torch.tensor([10.0, 20.0, 30.0, 25.0])
    b[1] = torch.tensor([-5.5, -3.25, w + 4.0, h + 2.5])
    return b


def test_paste_equals_grid_sample():
    g = torch.Generator().manual_seed(3)
    h, w, n = 61, 83, 40
    masks = torch.rand(n, 28, 28, generator=g)
    boxes = _boxes(g, n, h, w)
    ref = _grid_sample_paste(masks, boxes, h, w)
    got = paste_probs(masks, boxes, h, w)
    assert got.shape == (n, h, w) and got.dtype == torch.float32
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=0)
    # the bool masks agree wherever the probability is not within rounding of the threshold
    far = (ref - 0.5).abs() > 1e-5
    assert torch.equal(paste_masks(masks, boxes, h, w)[far], (ref >= 0.5)[far])


def test_paste_outside_the_box_is_zero():
    masks = torch.ones(1, 28, 28)
    probs = paste_probs(masks, torch.tensor([[10.0, 20.0, 30.0, 25.0]]), 40, 50)[0]
    assert float(probs[20:25, 10:30].min()) > 0.5
    probs[20:25, 10:30] = 0
    assert float(probs.abs().max()) == 0.0


def test_paste_in_chunks_equals_one_chunk(monkeypatch):
    from mpirun_kit.maskrcnn.modeling import postprocess

    g = torch.Generator().manual_seed(5)
    masks, boxes = torch.rand(7, 28, 28, generator=g), _boxes(g, 7, 30, 40)
    whole = paste_masks(masks, boxes, 30, 40)
    monkeypatch.setattr(postprocess, "_PASTE_CHUNK", 30 * 40 * 2)  # 2 masks a chunk
    assert torch.equal(paste_masks(masks, boxes, 30, 40), whole)


def test_paste_of_no_masks():
    out = paste_masks(torch.zeros(0, 28, 28), torch.zeros(0, 4), 30, 40)
    assert out.shape == (0, 30, 40) and out.dtype == torch.bool
