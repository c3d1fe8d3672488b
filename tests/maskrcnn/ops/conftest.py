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
