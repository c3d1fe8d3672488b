"""docs/threat-model.md's host and channel table: every row names the test that shows it, and that test exists
(issue 27: "every row of its table names the test that shows it")."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def host_rows() -> list[list[str]]:
    text = (REPO / "docs" / "threat-model.md").read_text()
    section = text.split("## The host and the result channel", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    assert rows and rows[0] == ["who", "what they get", "shown by"], rows[:1]
    return rows[1:]


def test_every_row_of_the_host_table_names_a_test_that_exists():
    rows = host_rows()
    assert len(rows) >= 15
    for who, _, shown in rows:
        if who == "out of scope":
            continue
        m = re.fullmatch(r"(tests/[\w/]+\.py)::(test_\w+)", shown)
        assert m, f"row {who!r}: 'shown by' must be tests/FILE.py::test_name, got {shown!r}"
        path, name = REPO / m.group(1), m.group(2)
        assert path.exists(), f"row {who!r}: {path} does not exist"
        assert re.search(rf"^def {name}\(", path.read_text(), re.M), f"row {who!r}: no test {name} in {path}"
