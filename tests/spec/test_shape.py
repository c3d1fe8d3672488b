"""spec/shape.py: a spec declared once.  From a dataclass's field declarations alone come its JSON Schema (the job
spec's dialect and the wire dialect a LaunchSpec travels in) and the value decoded from a mapping."""
from __future__ import annotations

from dataclasses import make_dataclass

import pytest

from mpirun_kit.spec.shape import Pairs, decode, json_schema, key


def test_a_new_field_needs_its_declaration_only():
    # A section with one more field: the schema takes its key and bound, decoding builds it, nothing else changes.
    Extra = make_dataclass("Extra", [("depth", int, key(3, minimum=1, doc="how deep")),
                                     ("tags", Pairs, key(()))], frozen=True)
    schema = json_schema(Extra)
    assert schema["properties"]["depth"] == {"type": "integer", "minimum": 1, "description": "how deep", "default": 3}
    assert decode(Extra, {"depth": 5, "tags": {"a": 1}}) == Extra(depth=5, tags=(("a", "1"),))
    assert json_schema(Extra, wire=True)["properties"]["tags"]["anyOf"][1]["type"] == "array"


def test_the_wire_dialect_takes_null_for_unset_and_pairs_as_lists():
    Wire = make_dataclass("Wire", [("argv", tuple[str, ...], key(min_items=1)),
                                   ("slots", int | None, key(None, minimum=1)),
                                   ("env", Pairs, key((), names={"pattern": "^[A-Z]+$"}))], frozen=True)
    schema = json_schema(Wire, wire=True)
    assert schema["required"] == ["argv"]
    assert schema["properties"]["slots"] == {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
    assert decode(Wire, {"argv": ["a"], "slots": None, "env": [["A", "1"]]}) == Wire(argv=("a",), env=(("A", "1"),))
    # the job spec's dialect: unset is absent (no null), a mapping's values are scalars kept as text.
    assert json_schema(Wire)["properties"]["slots"] == {"type": "integer", "minimum": 1}
    assert json_schema(Wire)["properties"]["env"]["additionalProperties"] == {"type": ["string", "number", "boolean"]}


def test_a_type_with_no_schema_is_refused_where_it_is_declared():
    Odd = make_dataclass("Odd", [("when", complex, key(0j))], frozen=True)
    with pytest.raises(TypeError, match="declare the field with key"):
        json_schema(Odd)
