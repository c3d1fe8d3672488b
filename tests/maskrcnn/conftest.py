"""Shared fixtures for the Mask R-CNN tests: one small synthetic shapes set per session."""
from __future__ import annotations

import pytest

from mpirun_kit.maskrcnn.data.synthetic import write_shapes_dataset


@pytest.fixture(scope="session")
def shapes(tmp_path_factory):
    """A 24-train / 8-val synthetic COCO dataset (read-only: copy it before corrupting anything)."""
    root = tmp_path_factory.mktemp("shapes")
    write_shapes_dataset(root, n_train=24, n_val=8, size=96, seed=7)
    return root
