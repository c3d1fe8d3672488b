"""Feature Pyramid Network: backbone C2..C5 -> P2..P6 (strides 4..64), all ``out_channels`` wide.

P2..P5 come from the top-down path with lateral 1x1 and output 3x3 convs; P6 is a stride-2
subsample of P5 (used by the RPN only, as in the standard recipe).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

STRIDES = (4, 8, 16, 32, 64)


class FPN(nn.Module):
    def __init__(self, in_channels: list[int], out_channels: int):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, 1) for c in in_channels)
        self.output = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 3, padding=1) for _ in in_channels)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_uniform_(m.weight, a=1)
                nn.init.zeros_(m.bias)
        self.out_channels = out_channels

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        last = self.lateral[-1](feats[-1])
        outs = [self.output[-1](last)]
        for i in range(len(feats) - 2, -1, -1):
            lat = self.lateral[i](feats[i])
            last = lat + F.interpolate(last, size=lat.shape[-2:], mode="nearest")
            outs.insert(0, self.output[i](last))
        outs.append(F.max_pool2d(outs[-1], kernel_size=1, stride=2))
        return outs
