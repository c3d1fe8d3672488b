"""The documentation: README.md and the MkDocs site in docs/ build, and their shell blocks run.

Every shell block (```bash, ```sh, ```shell, ```console) in README.md and docs/**.md carries a
marker, an HTML comment on the line before its fence (invisible on GitHub and in the site), that
says how it is checked:

  <!-- shell: run -->                 this module runs it (bash -e, in the repository root): exit 0
  <!-- shell: run-in-tmp -->          the same from a fresh empty directory (the README's first job)
  <!-- shell: tested-by tests/x.py::test_y -->   another test runs it as written; that test must
                                      exist and read the page the block is in
  <!-- shell: needs aws -->  /  <!-- shell: needs gpu -->    not run here: no AWS account, no GPU
  <!-- shell: installs -->            installs software on the machine (apt, pip, the quick start);
                                      CI runs `bash ops/quickstart.sh test`, which is one of them

`run` and `run-in-tmp` take options after them: `sim` (needs root and namespaces: the simulated
cluster), `slow` (minutes: marked slow), `exits=N` (the exit status the block ends with, when it shows
an error; 0 otherwise), and `; prints the next block`, which compares what the block prints (stdout and
stderr) with the fenced block that follows, as a set of lines: ranks print in any order.  A block without a marker, or with one this module does not know, fails the suite.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"^<!-- shell: (.+?) -->$")
KINDS = ("run-in-tmp", "run", "tested-by", "needs aws", "needs gpu", "installs")
RUN_OPTIONS = {"sim", "slow"}


@dataclass(frozen=True)
class Block:
    file: str          # relative to the repository
    line: int          # of the opening fence, 1-based
    lang: str
    body: str
    marker: str | None  # the text inside <!-- shell: ... -->, or None
    next_block: str | None  # the body of the next fenced block, if any

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(text: str, name: str) -> list[Block]:
    """Every fenced block of a Markdown text, with the marker on the line before its fence."""
    lines = text.splitlines()
    found: list[tuple[int, str, str, str | None]] = []  # (line, lang, body, marker)
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,})(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        start, body = i, []
        i += 1
        while i < len(lines) and not re.match(rf"^{indent}{fence}\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        prev = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mm = MARKER.match(prev)
        found.append((start + 1, lang, "\n".join(body) + "\n", mm.group(1) if mm else None))
    return [Block(name, ln, lang, body, marker, found[k + 1][2] if k + 1 < len(found) else None)
            for k, (ln, lang, body, marker) in enumerate(found)]


def shell_blocks() -> list[Block]:
    out = []
    for path in doc_files():
        out += [b for b in blocks(path.read_text(), str(path.relative_to(REPO))) if b.lang in SHELL_LANGS]
    return out


def parse_marker(marker: str) -> tuple[str, set[str], bool, str]:
    """'run sim; prints the next block' -> ('run', {'sim'}, True, '')."""
    head, _, tail = marker.partition(";")
    prints = tail.strip() == "prints the next block"
    if tail.strip() and not prints:
        raise ValueError(f"unknown marker suffix {tail.strip()!r}; expected 'prints the next block'")
    kind = next((k for k in KINDS if head.strip() == k or head.strip().startswith(k + " ")), None)
    if kind is None:
        raise ValueError(f"unknown marker {marker!r}; expected one of: {', '.join(KINDS)}")
    rest = head.strip()[len(kind):].strip()
    if kind in ("run", "run-in-tmp"):
        opts = set(rest.split())
        opts -= {o for o in opts if re.fullmatch(r"exits=\d+", o)}
        if opts - RUN_OPTIONS:
            raise ValueError(f"unknown option(s) {sorted(opts - RUN_OPTIONS)} after {kind!r}; "
                             f"expected {sorted(RUN_OPTIONS)}")
        return kind, opts, prints, ""
    if prints:
        raise ValueError(f"'prints the next block' only goes with run or run-in-tmp, not {kind!r}")
    if kind == "tested-by" and not re.fullmatch(r"tests/\S+\.py::test_\w+", rest):
        raise ValueError(f"tested-by needs tests/FILE.py::test_NAME, got {rest!r}")
    if kind != "tested-by" and rest:
        raise ValueError(f"unexpected text {rest!r} after {kind!r}")
    return kind, set(), False, rest


def marker_problems(block: Block) -> list[str]:
    """What is wrong with a block's marker (empty: nothing)."""
    if block.marker is None:
        return [f"{block}: ```{block.lang} block without a marker; put <!-- shell: run --> (or run-in-tmp, "
                f"tested-by tests/FILE.py::test_NAME, needs aws, needs gpu, installs) on the line before it"]
    try:
        kind, _, prints, ref = parse_marker(block.marker)
    except ValueError as exc:
        return [f"{block}: {exc}"]
    if prints and block.next_block is None:
        return [f"{block}: 'prints the next block' but no fenced block follows"]
    if kind == "tested-by":
        file, test = ref.split("::")
        path = REPO / file
        if not path.is_file():
            return [f"{block}: tested-by {ref}: no such file {file}"]
        source = path.read_text()
        if not re.search(rf"^def {test}\(", source, re.M):
            return [f"{block}: tested-by {ref}: {file} has no function {test}"]
        if block.file not in source:
            return [f"{block}: tested-by {ref}: {file} never names {block.file}, so it cannot read this block"]
    return []


def test_every_shell_block_is_marked():
    found = shell_blocks()
    assert len(found) > 10 and any(b.file == "README.md" for b in found)
    assert [p for b in found for p in marker_problems(b)] == []


def test_an_unmarked_or_unknown_block_is_reported():
    text = ("intro\n\n```bash\necho a\n```\n\n<!-- shell: run sometimes -->\n```sh\necho b\n```\n"
            "<!-- shell: tested-by tests/test_docs.py::test_nothing_here -->\n```console\n$ c\n```\n"
            "<!-- shell: needs aws -->\n```bash\naws s3 ls\n```\n")
    problems = [p for b in blocks(text, "x.md") if b.lang in SHELL_LANGS for p in marker_problems(b)]
    assert problems == [
        "x.md:3: ```bash block without a marker; put <!-- shell: run --> (or run-in-tmp, tested-by "
        "tests/FILE.py::test_NAME, needs aws, needs gpu, installs) on the line before it",
        "x.md:8: unknown option(s) ['sometimes'] after 'run'; expected ['sim', 'slow']",
        "x.md:12: tested-by tests/test_docs.py::test_nothing_here: tests/test_docs.py has no function "
        "test_nothing_here",
    ]


def _runnable() -> list:
    params = []
    for b in shell_blocks():
        if b.marker is None:
            continue
        try:
            kind, opts, _, _ = parse_marker(b.marker)
        except ValueError:
            continue
        if kind in ("run", "run-in-tmp"):
            marks = [getattr(pytest.mark, o) for o in sorted(opts)]
            params.append(pytest.param(b, id=str(b), marks=marks))
    return params


@pytest.mark.timeout(900)
@pytest.mark.parametrize("block", _runnable())
def test_shell_block_runs_as_written(block: Block, tmp_path):
    kind, opts, prints, _ = parse_marker(block.marker)
    if "sim" in opts and os.geteuid() != 0:
        pytest.fail("the simulated cluster needs root (network namespaces); run the sim tests as root")
    # the installed command, as a user's shell finds it after `source .venv/bin/activate`
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "AWS_EC2_METADATA_DISABLED": "true"}  # a block without AWS credentials never asks the metadata service
    cwd = tmp_path if kind == "run-in-tmp" else REPO
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.body], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=840)
    m = re.search(r"\bexits=(\d+)", block.marker)
    want_rc = int(m.group(1)) if m else 0
    assert r.returncode == want_rc, (
        f"{block} exited {r.returncode}, expected {want_rc}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    if prints:
        got = sorted(line for line in (r.stdout + r.stderr).splitlines() if line.strip())
        want = sorted(line for line in block.next_block.splitlines() if line.strip())
        assert got == want, f"{block} printed something else than the block after it\n--- stderr\n{r.stderr}"


def test_the_first_job_is_in_the_readme_and_run_from_an_empty_directory():
    """The README's first job: under ten lines, a heredoc spec and `mpirun_kit submit` on it."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Your first job"):]
    first = blocks(section, "README.md")[0]  # the section's first block
    assert first.lang == "bash" and first.marker and parse_marker(first.marker)[0] == "run-in-tmp", (
        "README.md: the first job's block must be marked <!-- shell: run-in-tmp; prints the next block -->")
    body = first.body
    assert len(body.splitlines()) < 10 and "<<'EOF'" in body and "mpirun_kit submit hello.yaml" in body


def _mkdocs(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor
    return subprocess.run([sys.executable, "-m", "mkdocs", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_site_builds_strictly(tmp_path):
    r = _mkdocs(["build", "--strict", "--site-dir", str(tmp_path / "site")], REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "guide" / "maskrcnn" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The build above can fail: the same configuration refuses a link to a page that does not exist."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# x\n\nsee [the guide](guide/nope.md)\n")
    config = (REPO / "mkdocs.yml").read_text().split("\nnav:", 1)[0]
    validation = (REPO / "mkdocs.yml").read_text().split("\nvalidation:", 1)[1]
    (tmp_path / "mkdocs.yml").write_text(config + "\nvalidation:" + validation)
    r = _mkdocs(["build", "--strict", "--site-dir", str(tmp_path / "site")], tmp_path)
    assert r.returncode != 0 and "guide/nope.md" in r.stdout + r.stderr


def test_every_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = [str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")]
    assert sorted(p for p in pages if f": {p}\n" not in nav) == []


HISTORY = re.compile(r"\b(?:this|previous|earlier|last) round\b|\bbefore,? it took\b|\bcommit [0-9a-f]{7,40}\b"
                     r"|`[0-9a-f]{7,40}`", re.I)


def history_lines(text: str) -> list[str]:
    """Lines that tell a page's history (rounds, commit hashes, 'before, it took'): git keeps that."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)]


def test_benchmarks_page_holds_the_run_of_record_only():
    """docs/benchmarks.md: method, machine and the run of record; earlier runs are in git's history."""
    assert history_lines((REPO / "docs" / "benchmarks.md").read_text()) == []


def test_history_is_found():
    text = "ok line\nthe previous round took 2 s\nworktrees of (`5172cc5`, `4ad96c3`)\nbefore, it took 3.5 s\n"
    assert [line.split(":")[0] for line in history_lines(text)] == ["2", "3", "4"]
