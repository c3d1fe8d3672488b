"""ResNet backbone: padded image batch -> C2..C5 feature maps for the FPN.

The module names follow torchvision's ResNet (conv1, bn1, layer1..layer4, downsample.0/.1) so an
ImageNet ResNet-50 ``state_dict`` saved by torchvision loads key for key.  Weights come from a local
file only (``load_backbone_weights``); nothing is ever downloaded.  With ``norm="frozen_bn"`` every
BatchNorm is a ``FrozenBatchNorm2d`` (fixed statistics and affine: batches of 2 images per GPU are
far too small to estimate them), folded into the convolution before it (``conv_norm``); ``freeze_at`` additionally stops gradients into the stem (1) and
res2 (2), the standard recipe.  ``norm="gn"`` is for small backbones trained from scratch.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from ...errors import SpecError
from ..config import BackboneConfig

log = logging.getLogger(__name__)


class WeightsFileError(SpecError):
    """The backbone weights file is missing, unreadable or does not fit the model."""


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm with fixed statistics and affine parameters (buffers, not parameters)."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # torchvision checkpoints carry num_batches_tracked, which a frozen BN has no use for
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def folded(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-channel affine (scale, shift) [1, C, 1, 1] in ``dtype``, computed once.

        The four buffers only change by load_state_dict, .to() or an in-place write, each of which
        changes a buffer's identity or version counter: that is the cache key (host-side
        integers, so checking it costs the device nothing).
        """
        if torch.compiler.is_compiling():
            # a traced graph computes it inline (dynamo cannot compare data pointers; the compiler
            # folds the few per-channel ops into the graph)
            scale = (self.weight * (self.running_var + self.eps).rsqrt()).detach()
            shift = (self.bias - self.running_mean * scale).detach()
            return scale.view(1, -1, 1, 1).to(dtype), shift.view(1, -1, 1, 1).to(dtype)
        bufs = (self.weight, self.bias, self.running_mean, self.running_var)
        key = (dtype, *((b.data_ptr(), b._version, b.device) for b in bufs))
        cached = self.__dict__.get("_folded")
        if cached is None or cached[0] != key:
            with torch.no_grad():
                scale = self.weight * (self.running_var + self.eps).rsqrt()
                shift = self.bias - self.running_mean * scale
            cached = (key, scale.view(1, -1, 1, 1).to(dtype), shift.view(1, -1, 1, 1).to(dtype))
            self.__dict__["_folded"] = cached
        return cached[1], cached[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale, shift = self.folded(x.dtype)
        return torch.addcmul(shift, x, scale)

    def fold_into(self, conv: nn.Conv2d) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight, bias) of one convolution equal to ``self(conv(x))``: the scale folded into the
        conv's output channels, the shift as its bias.

        The affine then costs a pass over the weights instead of one over the activations (and
        another in backward): issue #32, FrozenBN's ``addcmul`` was 0.4-0.55 s of a 1-thread CPU
        step.  A weight that autograd tracks is folded on every call (its gradient flows through
        the product); otherwise the folded pair is kept until the weight or the buffers change.
        """
        scale, shift = self.folded(conv.weight.dtype)
        w = conv.weight
        if (torch.is_grad_enabled() and w.requires_grad) or torch.compiler.is_compiling():
            return w * scale.view(-1, 1, 1, 1), shift.view(-1)
        key = (w.data_ptr(), w._version, w.device, w.dtype, self.__dict__["_folded"][0])
        cached = self.__dict__.get("_conv_folded")
        if cached is None or cached[0] != key:
            with torch.no_grad():
                cached = (key, w * scale.view(-1, 1, 1, 1), shift.view(-1))
            self.__dict__["_conv_folded"] = cached
        return cached[1], cached[2]


def conv_norm(conv: nn.Conv2d, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``norm(conv(x))``, as one convolution when the norm is a FrozenBatchNorm2d (``fold_into``)."""
    if isinstance(norm, FrozenBatchNorm2d):
        weight, bias = norm.fold_into(conv)
        return F.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation, conv.groups)
    return norm(conv(x))


def _norm(cfg: BackboneConfig, channels: int) -> nn.Module:
    if cfg.norm == "gn":
        return nn.GroupNorm(min(cfg.gn_groups, channels), channels)
    return FrozenBatchNorm2d(channels)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cfg: BackboneConfig, in_ch: int, width: int, stride: int):
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = _norm(cfg, width)
        # stride on the 3x3 conv (torchvision "ResNet v1.5"), which the torchvision weights expect
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = _norm(cfg, width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = _norm(cfg, out_ch)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), _norm(cfg, out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ReLU and the residual add in place, on the fresh outputs of the norms (whose backward
        # needs none of them): no feature-map-sized allocation, zero-fill and copy per ReLU
        # (issue #32: 57 out-of-place clamp_min of a 1-thread step, 0.4 s; torchvision's are in place)
        out = F.relu_(conv_norm(self.conv1, self.bn1, x))
        out = F.relu_(conv_norm(self.conv2, self.bn2, out))
        out = conv_norm(self.conv3, self.bn3, out)
        identity = x if self.downsample is None else conv_norm(self.downsample[0], self.downsample[1], x)
        return F.relu_(out.add_(identity))


class ResNet(nn.Module):
    """Returns ``[C2, C3, C4, C5]`` (strides 4, 8, 16, 32)."""

    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.cfg = cfg
        self.conv1 = nn.Conv2d(3, cfg.stem_width, 7, stride=2, padding=3, bias=False)
        self.bn1 = _norm(cfg, cfg.stem_width)
        in_ch = cfg.stem_width
        self.out_channels: list[int] = []
        for i, blocks in enumerate(cfg.depth):
            width = cfg.base_width * 2**i
            layers = []
            for b in range(blocks):
                layers.append(Bottleneck(cfg, in_ch, width, stride=(1 if i == 0 or b > 0 else 2)))
                in_ch = width * Bottleneck.expansion
            self.add_module(f"layer{i + 1}", nn.Sequential(*layers))
            self.out_channels.append(in_ch)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        self._freeze(cfg.freeze_at)

    def _freeze(self, freeze_at: int) -> None:
        frozen = [self.conv1, self.bn1] if freeze_at >= 1 else []
        if freeze_at >= 2:
            frozen.append(self.layer1)
        for m in frozen:
            for p in m.parameters():
                p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = F.relu_(conv_norm(self.conv1, self.bn1, x))
        x = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
        outs = []
        for i in range(len(self.cfg.depth)):
            x = getattr(self, f"layer{i + 1}")(x)
            outs.append(x)
        return outs


def load_backbone_weights(model: ResNet, path: str | os.PathLike) -> None:
    """Load a torchvision-layout ResNet state_dict from a LOCAL file (fc.* is ignored).

    Raises:
        WeightsFileError: the file is missing or unreadable, or its keys/shapes do not fit.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsFileError(f"backbone weights file {path} does not exist; expected a local torchvision "
                               "ResNet-50 state_dict (e.g. resnet50-0676ba61.pth copied there), or "
                               "--set model.backbone.weights= to train from scratch")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises several unrelated types for a bad file
        raise WeightsFileError(f"backbone weights file {path} could not be read ({exc}); "
                               "expected a torch.save'd state_dict") from exc
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    own = model.state_dict()
    bad = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    if bad:
        raise WeightsFileError(f"backbone weights file {path}: shape mismatch for {bad[0]} "
                               f"(file {tuple(state[bad[0]].shape)}, model {tuple(own[bad[0]].shape)}); "
                               "expected a ResNet matching model.backbone.depth/base_width")
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise WeightsFileError(f"backbone weights file {path}: {len(missing)} missing key(s) (e.g. "
                               f"{missing[:1]}), {len(unexpected)} unexpected (e.g. {unexpected[:1]}); "
                               "expected torchvision's ResNet layout")
    log.info("loaded backbone weights from %s (%d tensors)", path, len(state))
