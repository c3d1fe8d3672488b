"""ops/params.py: the proposal settings' one home, and the import circle it broke (issue #38).

``reference.py`` and ``proposals.py`` imported each other (``ProposalParams`` lived in proposals.py,
its default clip in reference.py); both now import ``params.py``, which imports neither.
"""
from __future__ import annotations

import ast
from pathlib import Path

from mpirun_kit.maskrcnn import ops
from mpirun_kit.maskrcnn.ops import params, proposals, reference

OPS = Path(ops.__file__).parent


def _imports(name: str) -> set[str]:
    """The sibling modules ``ops/<name>.py`` imports, at any depth of its code (TYPE_CHECKING included)."""
    tree = ast.parse((OPS / f"{name}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module} if node.module else {a.name for a in node.names}
    return out


def test_reference_and_params_import_nothing_that_imports_them_back():
    assert "proposals" not in _imports("reference")
    assert _imports("params") == {"_checks"}
    assert {"params", "reference"} <= _imports("proposals")


def test_one_proposal_params_and_one_clip_for_every_entry_point():
    assert proposals.ProposalParams is reference.ProposalParams is params.ProposalParams is ops.ProposalParams
    assert reference.DEFAULT_CLIP == params.DEFAULT_CLIP == ops.DEFAULT_CLIP
    assert ops.ProposalParams(5, 5, 0.7).clip_value == params.DEFAULT_CLIP
