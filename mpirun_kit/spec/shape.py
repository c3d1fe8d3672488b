"""The one declaration of a spec's shape: dataclass fields with metadata, and what is made from them.

Place in the data flow: schema.py (the job spec) and launch_spec.py (the LaunchSpec) declare their
values as frozen dataclasses whose fields carry, in ``key(...)``, what a type cannot say: the YAML/JSON
key when it differs from the field's name, the bounds, patterns and choices, a description for editors.
From those declarations alone come

* ``json_schema(cls)``: the JSON Schema (schema.py publishes the job spec's as job.schema.json;
  launch_schema.py checks a serialized LaunchSpec with it, ``wire=True``), and through it the located
  error messages findings.py writes (jsonschema names what the generated schema refuses);
* ``decode(cls, raw)``: the value built from a mapping the schema accepted, field by field, so a new
  field needs no line anywhere but its declaration.

Two dialects of one declaration: a YAML job spec (``wire=False``) omits what is unset, and its mappings of
names to scalars take numbers and booleans, kept as their text; a LaunchSpec on the wire (``wire=True``) is
what ``dataclasses.asdict`` writes: unset is null and a mapping may come as a list of pairs.

Every host's entrypoint imports this module (launch_spec.py's ``from_dict``), so it needs nothing but the
standard library's dataclasses and typing.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Mapping

#: a mapping of names to text, kept in order (env, hyperparameters, MCA parameters, tags).
Pairs = tuple[tuple[str, str], ...]

STR = {"type": "string"}
#: an environment variable's name.
NAME = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}
#: a value written as text where YAML may give a number or a boolean (``lr: 0.1``, ``debug: true``).
SCALAR = {"type": ["string", "number", "boolean"]}

# JSON Schema keywords taken by ``key`` under Python names.
_KEYWORDS = {"enum": "enum", "const": "const", "minimum": "minimum", "maximum": "maximum",
             "exclusive_minimum": "exclusiveMinimum", "pattern": "pattern", "min_items": "minItems"}
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def key(default: Any = MISSING, *, factory: Any = MISSING, doc: str | None = None, name: str | None | type = str,
        required: bool | None = None, accepts: dict | None = None, items: dict | None = None,
        names: dict | None = None, keyed_by: str | None = None, read: Any = None, **schema: Any) -> Any:
    """A dataclass field declared with what its schema and decoding need.

    Args:
        default, factory: the field's default (as ``dataclasses.field``).
        doc: its description for editors (also the words of an error when a pattern or anyOf refuses it).
        name: the key in the YAML/JSON when it differs from the field's name; None: not a key at all.
        required: the key must be given although the value has a default (``apiVersion``).
        accepts: the schema of what the key takes, instead of the one its type gives.
        items: a list's item schema; names: a mapping's key schema (propertyNames).
        keyed_by: a tuple of dataclasses written as a mapping keyed by this field of each (``data:``).
        read: applied to the raw value before it is built (``"auto"`` -> None).
        **schema: JSON Schema keywords: enum, const, minimum, maximum, exclusive_minimum, pattern, min_items.
    """
    meta: dict[str, Any] = {"schema": {_KEYWORDS[k]: (list(v) if k == "enum" else v) for k, v in schema.items()}}
    for k, v in (("doc", doc), ("accepts", accepts), ("items", items), ("names", names), ("keyed_by", keyed_by),
                 ("read", read), ("required", required)):
        if v is not None:
            meta[k] = v
    if name is not str:
        meta["key"] = name
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


def key_of(f: dataclasses.Field) -> str | None:
    """The YAML/JSON key of a field (None: the field is not read from a key)."""
    return f.metadata.get("key", f.name)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Each field's type; strings (``from __future__ import annotations``) are evaluated, once per class."""
    if cls not in _HINTS:
        kinds = {f.name: f.type for f in fields(cls)}
        _HINTS[cls] = typing.get_type_hints(cls) if any(isinstance(t, str) for t in kinds.values()) else kinds
    return _HINTS[cls]


def _optional(tp: Any) -> tuple[Any, bool]:
    """(T, True) for ``T | None``; (tp, False) otherwise."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _item_type(tp: Any) -> Any | None:
    """X for ``tuple[X, ...]``; None for anything else."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


# --- the JSON Schema ---------------------------------------------------------------------------

def json_schema(cls: type, *, wire: bool = False) -> dict:
    """The JSON Schema of a declared dataclass: an object with exactly its fields' keys."""
    hints = _hints(cls)
    props: dict[str, dict] = {}
    required: list[str] = []
    for f in fields(cls):
        k = key_of(f)
        if k is None:
            continue
        props[k] = _field_schema(hints[f.name], f, wire)
        if f.metadata.get("required", f.default is MISSING and f.default_factory is MISSING):
            required.append(k)
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
    if required:
        out["required"] = required
    return out


def _field_schema(tp: Any, f: dataclasses.Field, wire: bool) -> dict:
    m = f.metadata
    inner, nullable = _optional(tp)
    if "accepts" in m:
        s = dict(m["accepts"])
    elif "enum" in m.get("schema", {}) or "const" in m.get("schema", {}):
        s = {}  # the choices say the type (and one error, not two, names a wrong value)
    else:
        s = _type_schema(inner, m, wire)
    s.update(m.get("schema", {}))
    if nullable and wire:
        s = {"type": [s["type"], "null"]} if set(s) == {"type"} and isinstance(s["type"], str) else \
            {"anyOf": [s, {"type": "null"}]}
    if "doc" in m:
        s["description"] = m["doc"]
    # For editors ("" means unset, not a value); the dataclass's default is the one that counts.
    if not wire and isinstance(f.default, (str, int, float)) and f.default != "" and "const" not in s \
            and "accepts" not in m:
        s["default"] = f.default
    return s


def _type_schema(tp: Any, m: Mapping, wire: bool) -> dict:
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if is_dataclass(tp):
        return json_schema(tp, wire=wire)
    if tp == Pairs:
        names = m.get("names")
        as_map = {"type": "object", **({"propertyNames": names} if names else {}),
                  "additionalProperties": STR if wire else SCALAR}
        if not wire:
            return as_map
        word = "NAME" if names else "name"
        return {"anyOf": [as_map, {"type": "array", "items": {"type": "array", "prefixItems": [names or STR, STR],
                                                              "minItems": 2, "maxItems": 2}}],
                "description": f"a mapping of {word}: string, or a list of [{word}, string] pairs"}
    item = _item_type(tp)
    if item is not None and "keyed_by" in m:
        return {"type": "object", **({"propertyNames": m["names"]} if "names" in m else {}),
                "additionalProperties": json_schema(item, wire=wire)}
    if item is not None:
        return {"type": "array", "items": m.get("items") or _type_schema(item, {}, wire)}
    raise TypeError(f"no JSON Schema for {tp!r}: declare the field with key(accepts=...)")


# --- decoding ----------------------------------------------------------------------------------

def text(value: Any) -> str:
    """A scalar as the text a string field holds (YAML's ``true`` is ``"true"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def decode(cls: type, raw: Mapping | None, **given: Any):
    """``cls`` built from a mapping its schema accepted; ``given`` fills fields that are not keys.

    Each key becomes its field's kind: a dataclass from its mapping, a list a tuple, a mapping of scalars
    (or a list of pairs) ``Pairs``, a number or boolean where the field holds text that text; absent keys
    keep the dataclass's defaults."""
    hints = _hints(cls)
    out = dict(given)
    for f in fields(cls):
        k = key_of(f)
        if k is not None and raw and k in raw:
            out[f.name] = _value(hints[f.name], raw[k], f.metadata)
    return cls(**out)


def _value(tp: Any, v: Any, m: Mapping) -> Any:
    if "read" in m:
        v = m["read"](v)
    if v is None:
        return None
    tp, _ = _optional(tp)
    if is_dataclass(tp):
        return decode(tp, v)
    if tp == Pairs:
        return tuple((str(k), text(x)) for k, x in (v.items() if isinstance(v, Mapping) else v))
    item = _item_type(tp)
    if item is not None and "keyed_by" in m:
        return tuple(decode(item, entry, **{m["keyed_by"]: name}) for name, entry in v.items())
    if item is not None:
        return tuple(_value(item, x, {}) for x in v)
    if tp is str and isinstance(v, (bool, int, float)):
        return text(v)
    return v
