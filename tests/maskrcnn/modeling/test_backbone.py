"""modeling/backbone.py: the ResNet's ReLUs and residual adds run in place, with the same values and gradients.

Issue #32: a 1-thread train step of the peer benchmark spent 0.4 s in 57 out-of-place ReLUs
(``clamp_min``) of feature-map size, each with its allocation; torchvision's ResNet runs them in place.
Counted with a dispatch mode, so the test says which ops ran, not how long they took.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from mpirun_kit.maskrcnn.config import BackboneConfig
from mpirun_kit.maskrcnn.modeling.backbone import Bottleneck, FrozenBatchNorm2d, ResNet


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


class _Ops(TorchDispatchMode):
    """Counts the aten ops that ran."""

    def __init__(self):
        super().__init__()
        self.seen: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.seen[name] = self.seen.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def _random_bn(model: torch.nn.Module) -> None:
    """FrozenBN buffers that are not the identity (loaded weights are not)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, FrozenBatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 2.0)


def _unfolded(model: ResNet, x: torch.Tensor) -> list[torch.Tensor]:
    """The backbone with every FrozenBN applied after its conv (the per-activation affine)."""
    def block(b, x):
        out = F.relu(b.bn1(b.conv1(x)))
        out = F.relu(b.bn2(b.conv2(out)))
        out = b.bn3(b.conv3(out))
        return F.relu(out + (x if b.downsample is None else b.downsample(x)))

    x = F.max_pool2d(F.relu(model.bn1(model.conv1(x))), kernel_size=3, stride=2, padding=1)
    outs = []
    for i in range(len(model.cfg.depth)):
        for b in getattr(model, f"layer{i + 1}"):
            x = block(b, x)
        outs.append(x)
    return outs


@pytest.mark.parametrize("freeze_at", [0, 2])
def test_frozen_bn_is_folded_into_the_convs(freeze_at):
    """Issue #32: FrozenBN's affine ran as an addcmul over every conv's output (0.4-0.55 s of a
    1-thread CPU step) and a mul in backward; folded into the conv's weight and bias, neither runs.
    Failed before: 15 addcmul in this forward."""
    torch.manual_seed(0)
    model = ResNet(dataclasses.replace(_cfg("frozen_bn"), freeze_at=freeze_at))
    _random_bn(model)
    x = torch.randn(2, 3, 64, 96)
    with _Ops() as mode:
        outs = model(x)
        sum(o.square().sum() for o in outs).backward()
    assert "addcmul" not in mode.seen, mode.seen
    got = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    want = _unfolded(model, x)
    sum(o.square().sum() for o in want).backward()
    for o, w in zip(outs, want):
        torch.testing.assert_close(o, w, atol=1e-4, rtol=1e-4)
    for g, w in zip(got, [p.grad for p in model.parameters() if p.requires_grad]):
        # float32 sums over 2 x 32 x 48 outputs per stem weight: rounding relative to the largest
        torch.testing.assert_close(g, w, atol=1e-4 * float(w.abs().max()), rtol=1e-3)


def test_a_folded_weight_follows_changes_of_the_weight_and_the_buffers():
    """Outside autograd the folded pair is kept; an optimizer step, a load_state_dict of the BN
    buffers or an in-place write must each show in the next forward."""
    torch.manual_seed(0)
    model = ResNet(dataclasses.replace(_cfg("frozen_bn"), freeze_at=2))
    _random_bn(model)
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        model(x)  # fills the caches
        # a trainable conv changed in place (as SGD does), a frozen one written, BN buffers reloaded
        model.layer2[0].conv1.weight.mul_(1.5)
        model.conv1.weight.add_(0.01)
        state = model.layer1[0].bn2.state_dict()
        state["running_var"] = state["running_var"] * 3
        model.layer1[0].bn2.load_state_dict(state)
        for o, w in zip(model(x), _unfolded(model, x)):
            torch.testing.assert_close(o, w, atol=1e-4, rtol=1e-4)
