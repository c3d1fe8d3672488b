"""modeling/backbone.py: the ResNet's ReLUs and residual adds run in place, with the same values and gradients.

Issue #32: a 1-thread train step of the peer benchmark spent 0.4 s in 57 out-of-place ReLUs
(``clamp_min``) of feature-map size, each with its allocation; torchvision's ResNet runs them in place.
Counted with a dispatch mode, so the test says which ops ran, not how long they took.
"""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from mpirun_kit.maskrcnn.config import BackboneConfig
from mpirun_kit.maskrcnn.modeling.backbone import Bottleneck, ResNet


class _OutOfPlace(TorchDispatchMode):
    """Counts the out-of-place ReLUs and the out-of-place adds of 4-d tensors (feature maps)."""

    def __init__(self):
        super().__init__()
        self.count = {"relu": 0, "add": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.relu.default:
            self.count["relu"] += 1
        elif func is torch.ops.aten.add.Tensor and isinstance(out, torch.Tensor) and out.dim() == 4:
            self.count["add"] += 1
        return out


def _cfg(norm: str) -> BackboneConfig:
    return BackboneConfig(depth=(2, 1, 1, 1), stem_width=8, base_width=4, norm=norm, gn_groups=2, freeze_at=0, weights="")


@pytest.mark.parametrize("norm", ["frozen_bn", "gn"])
def test_forward_runs_no_out_of_place_relu_or_residual_add(norm):
    """Failed before: 1 + 3 per block out-of-place ReLUs and 1 add per block (16 and 5 here), in the forward."""
    torch.manual_seed(0)
    model = ResNet(_cfg(norm))
    x = torch.randn(2, 3, 64, 96)
    with _OutOfPlace() as mode:
        outs = model(x)
    assert mode.count == {"relu": 0, "add": 0}, mode.count
    sum(o.sum() for o in outs).backward()  # autograd accepts the in-place ops (its own adds sum gradients)
    assert all(p.grad is not None for p in model.parameters())


def _reference(block: Bottleneck, x: torch.Tensor) -> torch.Tensor:
    """The block as it was written before: every ReLU and the residual add out of place."""
    out = F.relu(block.bn1(block.conv1(x)))
    out = F.relu(block.bn2(block.conv2(out)))
    out = block.bn3(block.conv3(out))
    identity = x if block.downsample is None else block.downsample(x)
    return F.relu(out + identity)


@pytest.mark.parametrize("norm", ["frozen_bn", "gn"])
@pytest.mark.parametrize("stride,in_ch", [(1, 16), (2, 8)])  # identity and downsample shortcuts
def test_in_place_block_equals_the_out_of_place_one(norm, stride, in_ch):
    torch.manual_seed(0)
    block = Bottleneck(_cfg(norm), in_ch, 4, stride)
    if norm == "frozen_bn":  # not the identity: scale and shift that matter
        for bn in (block.bn1, block.bn2, block.bn3):
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, in_ch, 16, 24, requires_grad=True)
    got = block(x)
    got.square().sum().backward()
    grads = [x.grad.clone()] + [p.grad.clone() for p in block.parameters()]
    x.grad = None
    block.zero_grad()
    want = _reference(block, x)
    want.square().sum().backward()
    torch.testing.assert_close(got, want)
    for g, w in zip(grads, [x.grad] + [p.grad for p in block.parameters()]):
        torch.testing.assert_close(g, w)
