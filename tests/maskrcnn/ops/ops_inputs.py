"""Random input builders shared by the detection-op tests (a uniquely named module,
so importing it never picks up another directory's conftest)."""
from __future__ import annotations

import torch


def rand_boxes(g: torch.Generator, n: int, size: float = 100.0, dtype=torch.float32, max_wh: float = 40.0) -> torch.Tensor:
    """n random (x1, y1, x2, y2) boxes with x1 < x2, y1 < y2 inside roughly [0, size]."""
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * size
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * max_wh + 0.5
    return torch.cat([xy, xy + wh], dim=1).to(dtype)


def rand_rois(g: torch.Generator, k: int, batch: int, size: float, dtype=torch.float32) -> torch.Tensor:
    """k rois (batch index, x1, y1, x2, y2); some spill outside a size x size map."""
    b = torch.randint(0, batch, (k, 1), generator=g).to(torch.float64)
    xy = torch.rand(k, 2, generator=g, dtype=torch.float64) * size * 1.2 - size * 0.1
    wh = torch.rand(k, 2, generator=g, dtype=torch.float64) * size * 0.6
    return torch.cat([b, xy, xy + wh], dim=1).to(dtype)
