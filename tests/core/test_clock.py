"""core/clock.py: every wait takes the injected clock.  Nothing in the package calls ``time.sleep`` or reads
``time.monotonic`` but the clock itself (issue 31 item 3); the allow-list says why for each other file.  Nor
does a wait name the real clock where it should take the injected one (``SYSTEM_CLOCK.sleep``,
``Deadline(SYSTEM_CLOCK, ...)``: issue 38 item 4): SYSTEM_CLOCK is only a default, handed in from the top."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

from clock_kit import FakeClock

PACKAGE = Path(__file__).resolve().parents[2] / "mpirun_kit"
#: the only files that may read the real clock directly, each with its reason.
ALLOWED = {
    "core/clock.py": "the clock itself",
    "maskrcnn/train.py": "a program the launcher runs, not the launcher: it times its own evaluation and training "
                        "for its log line, and nothing waits on that",
}
DIRECT = {"sleep", "monotonic", "monotonic_ns"}


def direct_clock_uses(source: str) -> list[str]:
    """``time.sleep``/``time.monotonic`` (under any alias of the module) and ``from time import`` of them."""
    tree = ast.parse(source)
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
               if a.name == "time"}
    found = [f"line {n.lineno}: from time import {a.name}" for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom) and n.module == "time" for a in n.names if a.name in DIRECT]
    found += [f"line {n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
              and n.attr in DIRECT]
    found += [f"line {n.lineno}: SYSTEM_CLOCK.{n.attr}" for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "SYSTEM_CLOCK"
              and n.attr in DIRECT]
    found += [f"line {n.lineno}: Deadline(SYSTEM_CLOCK, ...)" for n in ast.walk(tree)
              if isinstance(n, ast.Call) and _name(n.func) in ("Deadline", "Backoff") and n.args
              and isinstance(n.args[0], ast.Name) and n.args[0].id == "SYSTEM_CLOCK"]
    return sorted(found)


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def test_the_check_finds_each_form():
    assert direct_clock_uses("import time\ntime.sleep(1)\n") == ["line 2: time.sleep"]
    assert direct_clock_uses("import time as t\nx = t.monotonic()\n") == ["line 2: t.monotonic"]
    assert direct_clock_uses("from time import sleep, time\n") == ["line 1: from time import sleep"]
    assert direct_clock_uses("import time\nstamp = time.time()\nclock.sleep(1)\n") == []
    # the real clock named in a wait instead of the injected one
    assert direct_clock_uses("SYSTEM_CLOCK.sleep(0.1)\n") == ["line 1: SYSTEM_CLOCK.sleep"]
    assert direct_clock_uses("d = Deadline(SYSTEM_CLOCK, 2.0)\n") == ["line 1: Deadline(SYSTEM_CLOCK, ...)"]
    assert direct_clock_uses("d = clock_mod.Deadline(SYSTEM_CLOCK, 2.0)\n") == ["line 1: Deadline(SYSTEM_CLOCK, ...)"]
    # ... but a default, handed down, is the injection itself
    assert direct_clock_uses("def f(clock=SYSTEM_CLOCK):\n    Deadline(clock, 1).expired()\n") == []


def test_no_wait_bypasses_the_injected_clock():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in ALLOWED and (uses := direct_clock_uses(path.read_text())):
            offenders[rel] = uses
    assert not offenders, ("these read the real clock directly; take a Clock (mpirun_kit/core/clock.py) and wait "
                           f"with Deadline/Backoff instead: {offenders}")
    for rel in ALLOWED:
        assert (PACKAGE / rel).is_file(), f"the allow-list names {rel}, which is gone: remove it"


def test_jitter_lives_in_one_backoff():
    """One backoff formula (core/backoff.py): no other launcher module draws its own jitter."""
    drawn = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if ".uniform(" in p.read_text() and not p.relative_to(PACKAGE).as_posix().startswith("maskrcnn/")}
    assert drawn == {"core/backoff.py"}


def test_deadline_on_a_fake_clock():
    clock = FakeClock(now=5.0)
    d = Deadline(clock, 2.0)
    assert (d.remaining(), d.expired()) == (2.0, False)
    clock.sleep(1.5)
    assert (d.elapsed(), d.remaining()) == (1.5, 0.5)
    clock.advance(1.0)
    assert d.expired() and d.remaining() == 0.0
    assert Deadline(clock, None).remaining() == float("inf")
    assert Deadline(FakeClock(jump=60.0), 10.0).expired()
    SYSTEM_CLOCK.sleep(0)  # a non-positive sleep returns at once


def test_the_clock_is_cheap_for_every_rank():
    """Every rank imports core/clock.py at start: it loads neither typing nor dataclasses (nor, through them,
    inspect), as exec/signals.py and plan/contract.py already avoid them."""
    code = "import sys, mpirun_kit.core.clock, mpirun_kit.core.backoff; print(sorted({'typing', 'dataclasses', " \
           "'inspect'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
