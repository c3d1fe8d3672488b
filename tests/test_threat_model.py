"""docs/threat-model.md's host and channel table: every row names the test that shows it, that test exists, and
it runs and passes (issue 27: "every row of its table names the test that shows it"; issue 39: the check ran
none of them, so a test that skipped, or planted what the code no longer reads, still counted).

What runs: the named tests that need no simulated cluster, in one pytest process (about 20 s), each of which
must pass, none skipped; the simulated-cluster ones (`sim`, a minute between them) must be collected under
their names here and run in the suite's own sim pass."""
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def host_rows() -> list[list[str]]:
    text = (REPO / "docs" / "threat-model.md").read_text()
    section = text.split("## The host and the result channel", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    assert rows and rows[0] == ["who", "what they get", "shown by"], rows[:1]
    return rows[1:]


def named_tests() -> list[str]:
    """The rows' tests as node ids (``tests/FILE.py::test_name``), each once."""
    return sorted({shown for who, _, shown in host_rows() if who != "out of scope"})


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


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.mpi
def test_every_named_test_runs_and_passes(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the rows' tests act as another user of the host (setpriv, chown): they need root")
    nodes = named_tests()
    report = tmp_path / "report.xml"
    r = _pytest("-q", "-m", "not sim", f"--junitxml={report}", *nodes)
    ran: dict[str, list[str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        node = case.get("classname").replace(".", "/") + ".py::" + case.get("name").split("[")[0]
        outcome = next((c.tag for c in case if c.tag in ("skipped", "failure", "error")), "passed")
        ran.setdefault(node, []).append(outcome if outcome == "passed" else
                                         f"{outcome}: {next(iter(case)).get('message', '')[:200]}")
    collected = _pytest("--collect-only", "-q", "-m", "sim", *nodes)
    sim = {line.split("[")[0] for line in collected.stdout.splitlines() if "::" in line}
    problems = [f"{n}: {'; '.join(o for o in ran[n] if o != 'passed')}" for n in nodes
                if n in ran and set(ran[n]) != {"passed"}]
    problems += [f"{n}: neither run nor collected as a sim test" for n in nodes if n not in ran and n not in sim]
    assert not problems, "the threat model's tests must run and pass:\n" + "\n".join(problems) + "\n" + r.stdout[-3000:]
