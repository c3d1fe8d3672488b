"""spec/findings.py: the findings engine: YAML parsed with each key's line, hostile YAML refused, and the words.

Whole specs' findings through load() are tested in test_load.py, fuzzed in test_fuzz.py; here the engine's
own pieces, each with the text a user reads.
"""
from __future__ import annotations

import datetime

import pytest

from mpirun_kit.spec.findings import (MAX_SPEC_BYTES, Finding, JobSpecError, did_you_mean, kind_of, line_of,
                                      parse_yaml, render_path)


def test_every_key_and_item_has_its_line():
    value, pos = parse_yaml("name: a\nprogram:\n  command:\n    - python3\n    - x.py\n", "s.yaml")
    assert value == {"name": "a", "program": {"command": ["python3", "x.py"]}}
    assert pos[("program", "command", 1)] == 5
    assert line_of(pos, ("program", "command", 1, "deeper")) == 5     # the nearest located parent
    assert line_of(pos, ("nowhere",)) == 1                            # the document itself


def test_a_duplicate_key_names_both_lines():
    with pytest.raises(JobSpecError) as e:
        parse_yaml("name: a\nenv:\n  X: 1\n  X: 2\n", "s.yaml")
    assert str(e.value) == "s.yaml:4: env.X: duplicate key (first at line 3); keep one"


@pytest.mark.parametrize("text, words", [
    ("a: &x [1]\nb: *x\n", "YAML aliases (*name) are not accepted in a spec"),
    ("a: &x [*x]\n", "an anchor is used inside itself"),
    ("a: " + "[" * 40 + "]" * 40 + "\n", "nested more than 32 levels deep"),
    ("a: [1\n", "not valid YAML"),
    ("a: 1\n---\nb: 2\n", "not valid YAML"),
])
def test_hostile_or_broken_yaml_is_refused_before_it_is_built(text, words):
    with pytest.raises(JobSpecError, match=words.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        parse_yaml(text, "s.yaml")


def test_a_huge_file_is_refused_unread():
    with pytest.raises(JobSpecError, match=rf"^s.yaml: {MAX_SPEC_BYTES + 1} characters; a spec is at most "):
        parse_yaml("#" * (MAX_SPEC_BYTES + 1), "s.yaml")


def test_many_findings_are_sorted_by_line_and_cut_at_20():
    err = JobSpecError("s.yaml", [Finding(n, f"k{n}", "bad") for n in range(25, 0, -1)])
    lines = str(err).splitlines()
    assert lines[0] == "s.yaml: invalid job spec (25 problem(s)):"
    assert lines[1] == "  s.yaml:1: k1: bad" and lines[-1] == "  ... and 5 more"
    assert str(JobSpecError("s.yaml", [Finding(None, "", "empty")])) == "s.yaml: empty"


def test_paths_kinds_and_suggestions_in_the_users_words():
    assert render_path(("data", "coco", "s3")) == "data.coco.s3"
    assert render_path(("program", "args", 2)) == "program.args[2]"
    assert kind_of(None) == "null (empty value)" and kind_of(True) == "boolean true"
    assert kind_of(datetime.date(2024, 1, 2)) == "a date 2024-01-02 (quote it to make it a string)"
    assert did_you_mean("progam", ["program", "resources"]) == "did you mean 'program'? "
    assert did_you_mean("zzz", ["program"]) == ""
