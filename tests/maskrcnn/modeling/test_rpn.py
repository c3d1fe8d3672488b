"""modeling/rpn.py: anchors cached on the device per set of feature shapes."""
from __future__ import annotations

import torch

from mpirun_kit.maskrcnn.config import RPNConfig
from mpirun_kit.maskrcnn.modeling import rpn as rpn_module


def _feats(h: int, w: int) -> list[torch.Tensor]:
    # meta tensors stand in for the GPU (no GPU here): only shapes and the device matter
    return [torch.empty(2, 8, h // s, w // s, device="meta") for s in (4, 8, 16, 32, 64)]


def test_anchors_are_cached_per_feature_shapes_on_the_device(monkeypatch):
    """Two canvas shapes, alternating: anchors are built once per shape.  Before: the cache held
    one shape, so every alternation rebuilt them (4 builds, a host->device copy of the cell
    anchors per level each time)."""
    calls = []
    real = rpn_module.generate_anchors
    monkeypatch.setattr(rpn_module, "generate_anchors", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    model = rpn_module.RPN(RPNConfig(), 8)
    small, large = _feats(256, 320), _feats(320, 256)
    got = [model.anchors(f) for f in (small, large, small, large)]
    assert len(calls) == 2
    assert got[2][0] is got[0][0] and got[3][1] is got[1][1]
    anchors, levels = got[0]
    assert anchors.device.type == levels.device.type == "meta" and anchors.dtype == torch.float32
    assert anchors.shape[0] == levels.shape[0] == 3 * sum((256 // s) * (320 // s) for s in (4, 8, 16, 32, 64))


def test_anchor_cache_keeps_the_most_recently_used_shapes(monkeypatch):
    monkeypatch.setattr(rpn_module, "ANCHOR_CACHE_SHAPES", 2)
    model = rpn_module.RPN(RPNConfig(), 8)
    a, b, c = _feats(128, 128), _feats(192, 128), _feats(128, 192)
    first_a = model.anchors(a)[0]
    model.anchors(b)
    assert model.anchors(a)[0] is first_a  # a used again: b is now the oldest
    model.anchors(c)  # drops b
    assert len(model._anchor_cache) == 2 and model.anchors(a)[0] is first_a
