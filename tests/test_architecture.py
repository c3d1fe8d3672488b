"""docs/architecture.md's folder table: one row, one sentence, for every folder under mpirun_kit/ and every
top-level module, and every file a row names is in its folder, so a newcomer can check the table against the
code (a folder added without a sentence, or a module moved without its row, fails here)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "mpirun_kit"
DOC = REPO / "docs" / "architecture.md"


def folder_rows(text: str) -> dict[str, str]:
    """The folder table's rows: the first cell's path (`mpirun_kit/X/` or `mpirun_kit/x.py`) -> its sentence."""
    start = text.index("| folder | holds")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        m = re.match(r"\| `(mpirun_kit/[^`]+)` \| (.*) \|$", line)
        assert m, f"docs/architecture.md: a folder row names one path in its first cell: {line[:80]!r}"
        rows[m.group(1)] = m.group(2)
    return rows


def package_parts() -> set[str]:
    folders = {f"mpirun_kit/{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {f"mpirun_kit/{p.name}" for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    return folders | modules


def missing_files(path: str, sentence: str) -> list[str]:
    """Files (`x.py`, `sub/`) a folder's sentence names that the folder does not hold."""
    if not path.endswith("/"):
        return []
    folder = REPO / path
    out = []
    for name in re.findall(r"`([\w./]+)`", sentence):
        if "/" in name.rstrip("/") or not (name.endswith(".py") or name.endswith("/")):
            continue   # another folder's path (`stack/resolve.py`, checked by tests/test_readme.py) or a name
        if not (folder / name).exists():
            out.append(f"{path}: `{name}`")
    return out


def test_every_folder_and_module_has_one_row():
    rows = folder_rows(DOC.read_text())
    assert sorted(package_parts() - set(rows)) == [], "give each a row in docs/architecture.md's folder table"
    assert sorted(set(rows) - package_parts()) == [], "rows for folders that are gone"


def test_each_row_is_a_sentence_naming_files_its_folder_has():
    rows = folder_rows(DOC.read_text())
    assert [p for p, s in rows.items() if not s.endswith(".")] == []
    assert [m for p, s in rows.items() for m in missing_files(p, s)] == []


def test_a_folder_without_a_row_is_found(tmp_path):
    text = DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `mpirun_kit/core/`"))
    assert "mpirun_kit/core/" not in folder_rows(text.replace(row + "\n", ""))
    assert missing_files("mpirun_kit/core/", "`files.py` and `gone.py`.") == ["mpirun_kit/core/: `gone.py`"]
