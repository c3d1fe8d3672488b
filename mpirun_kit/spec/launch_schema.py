"""The schema of a serialized LaunchSpec (hyperparameters.json, ``entrypoint --spec``) and its fast check.

Place in the data flow: ``LaunchSpec.from_dict`` (launch_spec.py) checks every input against
``LAUNCH_SCHEMA`` before building anything: first with ``surely_valid``, and with jsonschema
(findings.py) when that fast check does not pass.  ``LAUNCH_SCHEMA`` is made from LaunchSpec's own
field declarations (shape.json_schema, the wire dialect: null for unset, pairs as a mapping or a list),
so a field, bound or choice added there is checked here the day it exists.  Kept apart from schema.py
because every host's entrypoint imports this module on the launch's critical path: schema.py also
builds the job spec's dataclasses and schema, which an entrypoint never needs.
"""
from __future__ import annotations

from . import launch_spec as _model
from .shape import json_schema

#: the one schema of a serialized ``model.LaunchSpec`` (hyperparameters.json, ``entrypoint --spec``).
LAUNCH_SCHEMA: dict = json_schema(_model.LaunchSpec, wire=True)


# --- the entrypoint's fast path --------------------------------------------------------------
# Every host's entrypoint checks the LaunchSpec before it can plan, so that check sits on the launch's
# critical path; importing jsonschema there (with its format modules) costs 45-65 ms of CPU per host,
# most of the launch regression measured after the trust-boundary work (README, Benchmarks: Launch).
# ``surely_valid`` answers only "certainly valid" for the keywords LAUNCH_SCHEMA uses; anything else
# (an unknown keyword, a doubtful value) answers False, and jsonschema, still the one authority,
# decides and names the problems.  tests/spec/test_launch_schema.py checks it never accepts what
# jsonschema rejects.
_JSON_TYPES = {"object": (dict,), "array": (list,), "string": (str,), "integer": (int,), "number": (int, float),
               "boolean": (bool,), "null": (type(None),)}
_FAST_KEYWORDS = frozenset({"type", "properties", "additionalProperties", "required", "anyOf", "enum", "minimum",
                            "maximum", "exclusiveMinimum", "items", "prefixItems", "minItems", "maxItems",
                            "pattern", "propertyNames", "description"})


def surely_valid(value, schema: dict) -> bool:
    """True only when ``value`` certainly satisfies ``schema`` (a subset of JSON Schema 2020-12)."""
    if not isinstance(schema, dict) or not _FAST_KEYWORDS.issuperset(schema):
        return False
    t = schema.get("type")
    if t is not None:
        kinds = [t] if isinstance(t, str) else t
        if not any(isinstance(value, _JSON_TYPES[k]) and not (isinstance(value, bool) and k not in ("boolean",))
                   for k in kinds if k in _JSON_TYPES):
            return False
    if "enum" in schema and not any(type(value) is type(e) and value == e for e in schema["enum"]):
        return False
    if "anyOf" in schema and not any(surely_valid(value, s) for s in schema["anyOf"]):
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value or value in (float("inf"), float("-inf")):
            return False
        if ("minimum" in schema and value < schema["minimum"]) or ("maximum" in schema and value > schema["maximum"]) \
                or ("exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]):
            return False
    if isinstance(value, str) and "pattern" in schema:
        import re

        if re.search(schema["pattern"], value) is None:
            return False
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            return False
        prefix = schema.get("prefixItems", [])
        if not all(surely_valid(v, s) for v, s in zip(value, prefix)):
            return False
        if "items" in schema and not all(surely_valid(v, schema["items"]) for v in value[len(prefix):]):
            return False
    if isinstance(value, dict):
        if any(k not in value for k in schema.get("required", ())):
            return False
        props, extra = schema.get("properties", {}), schema.get("additionalProperties", True)
        for k, v in value.items():
            if "propertyNames" in schema and not surely_valid(k, schema["propertyNames"]):
                return False
            if k in props:
                if not surely_valid(v, props[k]):
                    return False
            elif extra is False or (isinstance(extra, dict) and not surely_valid(v, extra)):
                return False
    return True
