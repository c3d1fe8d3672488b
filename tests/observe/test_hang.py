"""observe/hang.py's pure parts: who is blamed for a stall and why, the stall as data, the report file.

The stall policy (HangWatch), the monitor thread and the report's text are tested in test_hang_watch.py,
a real hung job in test_hang_local.py; the odd-one-out cases by stack in test_stacks.py.  Here: what those
leave out, with stacks written as the wrapper sends them.
"""
from __future__ import annotations

import stat

from mpirun_kit.observe.hang import (JSON_RANKS, Place, RankSample, Stall, blame, escape, hang_json, odd_ones,
                                     write_report)

HOSTS = {r: f"algo-{r // 2 + 1}" for r in range(40)}


def _stack(*frames):
    return {"threads": [{"thread": "main", "frames": [{"name": n, "file": f, "line": l} for n, f, l in frames]}],
            "how": "py-spy"}


def test_escape_keeps_a_report_line_one_line():
    assert escape("train.py") == "train.py"
    assert escape("evil\nmpirun_kit: hang detected") == "evil\\nmpirun_kit: hang detected"
    assert escape("\x1b[2Jx") == "\\x1b[2Jx"
    assert escape("a\\b") == "a\\\\b"


def test_ranks_behind_are_blamed_with_how_far_behind():
    assert blame(Stall({3: 12.04, 1: 7.5}, all=False), {}) == [
        (1, "7.5 s behind the others (it reports progress, they advanced)"),
        (3, "12.0 s behind the others (it reports progress, they advanced)")]


def test_a_tie_between_two_places_names_every_rank():
    at = {0: Place("run", "step", "step (a.py:1)"), 1: Place("run", "step", "step (b.py:2)")}
    assert [r for r, _ in odd_ones(at)] == [0, 1]
    assert "with no majority" in odd_ones(at)[0][1]


def test_the_minority_place_is_the_suspect():
    at = {r: Place("collective", "Allreduce", "x (t.py:9)") for r in range(3)}
    at[3] = Place("collective", "Barrier", "y (t.py:20)")
    assert odd_ones(at) == [(3, "in Barrier while ranks 0, 1, 2 wait in Allreduce")]


def test_a_gone_rank_is_the_suspect_while_others_wait():
    at = {0: Place("collective", "Allreduce", "x (t.py:9)"), 1: Place("collective", "Allreduce", "x (t.py:9)")}
    assert odd_ones(at, gone={2: "killed by SIGKILL"}) == [
        (2, "its process is gone (killed by SIGKILL) while ranks 0, 1 wait")]


def test_hang_json_holds_the_suspects_and_a_bounded_list_of_the_rest(tmp_path):
    stall = Stall({r: 400.0 for r in range(40)}, all=True)
    allreduce = _stack(("PMPI_Allreduce", "libmpi.so", 0), ("step", "train.py", 9))
    stacks = {r: allreduce for r in range(40)}
    stacks[7] = _stack(("compute", "train.py", 30))
    samples = {39: RankSample(400.0, [], "py-spy", at=0.0)}
    out = hang_json(stall, stacks, samples, HOSTS, {}, 300.0, 1700000000.0, "stall", tmp_path / "hang-report.txt")
    assert out["suspects"] == [7]
    assert (out["kind"], out["stall_s"], out["report"]) == ("stall", 300.0, str(tmp_path / "hang-report.txt"))
    # the suspect, then JSON_RANKS others (bounded: the result is one channel line), each rank once
    assert [r["rank"] for r in out["ranks"]] == list(range(1 + JSON_RANKS))
    seven = next(r for r in out["ranks"] if r["rank"] == 7)
    assert seven["suspect"] and seven["host"] == "algo-4" and seven["state"] == "run"
    assert seven["frames"] == ["compute (train.py:30)"]
    assert seven["why"].startswith("not in a collective")


def test_the_report_file_is_private_and_a_failed_write_is_none(tmp_path):
    path = write_report(tmp_path, "hang detected\n")
    assert path == tmp_path / "output" / "hang-report.txt"
    assert path.read_text() == "hang detected\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (tmp_path / "file").write_text("")
    assert write_report(tmp_path / "file", "x") is None   # output/ cannot be made under a file
