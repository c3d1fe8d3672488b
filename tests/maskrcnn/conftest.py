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


@pytest.fixture(autouse=True)
def _denormals_restored():
    """Leave the process's flush-to-zero mode off, its default, after every test: the trainer turns it on in every
    thread (issue #32), and later tests in this pytest (hypothesis's floats in tests/spec) need
    subnormals (tests/maskrcnn/test_maskrcnn_flush_isolation.py)."""
    from mpirun_kit.maskrcnn.ops import set_flush_denormal

    yield
    # Off is the process's default.  Unconditionally: the trainer's probe (denormals_flushed) asks the
    # intra-op threads, while the mode that broke hypothesis was the calling thread's.
    set_flush_denormal(False)
