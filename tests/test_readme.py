"""README.md and docs/ name only paths that exist (a moved module must take its documentation with it),
and the README stays a five-minute read."""
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


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_every_path_the_docs_name_exists():
    missing = []
    for doc in doc_files():
        missing += [f"{doc.relative_to(REPO)}: `{p}`" for p in sorted(named_paths(doc.read_text()))
                    if not (REPO / p).exists()]
    assert missing == []


def test_the_docs_name_paths_at_all():
    """The check above reads the pages it should (a renamed docs/ folder would make it pass empty)."""
    pages = {str(d.relative_to(REPO)): named_paths(d.read_text()) for d in doc_files()}
    assert "tests/test_layering.py" in pages["docs/architecture.md"]
    assert "mpirun_kit/errors.py" in pages["docs/cli.md"] and "jobs/allreduce-bench.yaml" in pages["README.md"]


def test_a_missing_path_is_found():
    assert named_paths("see `mpirun_kit/model.py`, `jobs/<name>.yaml` and `ls`") == {"mpirun_kit/model.py"}


def test_readme_is_a_five_minute_read():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines; keep it to 250 and move the rest into docs/"
