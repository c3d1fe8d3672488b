"""README.md names only paths that exist (a moved module must take its documentation with it)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("mpirun_kit/", "tests/", "jobs/", "docker/", "ops/", "cfn/", "benchmarks/", "docs/", ".ci/")


def named_paths(text: str) -> set[str]:
    """Every `code span` that is a repository path (placeholders such as <x>, ${x}, * left out)."""
    out = set()
    for m in re.finditer(r"`([^`\s]+)`", text):
        path = m.group(1).rstrip(".,:;)").split("::")[0]
        if path.startswith(ROOTS) and not any(c in path for c in "*{}<>$"):
            out.add(path)
    return out


def test_every_path_the_readme_names_exists():
    paths = named_paths((REPO / "README.md").read_text())
    assert "mpirun_kit/spec/launch_spec.py" in paths and "tests/test_layering.py" in paths
    assert sorted(p for p in paths if not (REPO / p).exists()) == []


def test_a_missing_path_is_found():
    assert named_paths("see `mpirun_kit/model.py`, `jobs/<name>.yaml` and `ls`") == {"mpirun_kit/model.py"}
