"""Fixtures for the detection-op tests: fresh random inputs every run, with the seed printed.

Each test gets a ``torch.Generator`` seeded from os.urandom; the seed is printed,
so a failing run shows it in pytest's captured output and can be replayed with
``MRK_OPS_SEED=<seed>``.
"""
from __future__ import annotations

import os

import pytest
import torch

from mpirun_kit.maskrcnn import ops


@pytest.fixture
def gen() -> torch.Generator:
    seed = int(os.environ.get("MRK_OPS_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"random seed: MRK_OPS_SEED={seed}")
    g = torch.Generator()
    g.manual_seed(seed)
    return g


@pytest.fixture
def compiled() -> None:
    """The compiled extension must be there (ops/quickstart.sh builds it); fail with the real cause if not."""
    err = ops.load_error()
    if err is not None:
        pytest.fail(f"compiled detection ops unavailable: {type(err).__name__}: {err}")


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
