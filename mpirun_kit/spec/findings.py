"""The findings engine: a job spec's problems as located values, and the YAML and schema checks that find them.

Place in the data flow: load.py parses a spec with ``parse_yaml`` (each key's line kept from
PyYAML's node marks; duplicate keys, aliases and absurd nesting refused before the value is
built), checks it with ``schema_findings`` (jsonschema, with "expected X, got Y" words and a
"did you mean" for misspelt keys), and checks.py adds the contradictions a schema cannot
express.  Every problem is a ``Finding``; ``JobSpecError`` carries them all, each rendered as
``FILE:LINE: key.path: expected X, got Y``.  launch_spec.py asks ``launch_spec_findings`` when
its fast check does not pass.
"""
from __future__ import annotations

import datetime
import difflib
import math
from dataclasses import dataclass
from typing import Any, Iterable

import yaml

from ..errors import SpecError
from . import schema as S
from .launch_schema import LAUNCH_SCHEMA


@dataclass(frozen=True)
class Finding:
    """One problem in a spec, located."""

    line: int | None
    path: str
    message: str

    def render(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class JobSpecError(SpecError):
    """A job spec failed to parse or validate; ``findings`` holds each problem."""

    def __init__(self, source: str, findings: Iterable[Finding]):
        self.source = source
        self.findings = tuple(sorted(findings, key=lambda f: (f.line or 0, f.path)))
        lines = [f.render(source) for f in self.findings[:20]]
        if len(self.findings) > 20:
            lines.append(f"... and {len(self.findings) - 20} more")
        head = f"{source}: invalid job spec ({len(self.findings)} problem(s)):\n  " if len(lines) > 1 else ""
        super().__init__(head + "\n  ".join(lines))



Path_ = tuple  # a key path: tuple of str keys and int indexes


#: deeper than any spec needs; bounds recursion on hostile input.
MAX_DEPTH = 32
#: a spec is a few KiB; anything past this is refused before it is parsed.
MAX_SPEC_BYTES = 1 << 20


class _Unwalkable(Exception):
    """A node graph that is not a tree of reasonable depth (recursive alias, absurd nesting)."""

    def __init__(self, finding: Finding):
        super().__init__(finding.message)
        self.finding = finding


def _positions(node: yaml.Node, path: Path_, out: dict, findings: list, active: frozenset = frozenset(),
               visited: set | None = None) -> None:
    """Record the 1-based line of every key/item; flag duplicate keys (YAML keeps the last silently).

    Raises:
        _Unwalkable: an alias (``*name``: a node reached twice; nested aliases multiply a 300-byte
            file into billions of values, so none are accepted), an anchor used inside itself (the
            value would be infinite) or nesting past MAX_DEPTH.
    """
    line = node.start_mark.line + 1
    if id(node) in active:
        raise _Unwalkable(Finding(line, render_path(path), "an anchor is used inside itself (a recursive alias); "
                                                           "a spec must be a plain tree"))
    visited = set() if visited is None else visited
    if id(node) in visited:
        raise _Unwalkable(Finding(out.get(path, line), render_path(path), "YAML aliases (*name) are not accepted in a spec "
                                                           "(each can multiply the file's size); write the value out"))
    visited.add(id(node))
    if len(path) > MAX_DEPTH:
        raise _Unwalkable(Finding(line, render_path(path[:3]) + "...",
                                  f"nested more than {MAX_DEPTH} levels deep; no spec key goes that deep"))
    active = active | {id(node)}
    out.setdefault(path, line)
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            if key is not None and key in seen and knode.tag.endswith(":str"):
                findings.append(Finding(knode.start_mark.line + 1, render_path(path + (key,)),
                                        f"duplicate key (first at line {seen[key]}); keep one"))
            if key is not None:
                seen.setdefault(key, knode.start_mark.line + 1)
                out[path + (key,)] = knode.start_mark.line + 1
                _positions(vnode, path + (key,), out, findings, active, visited)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _positions(item, path + (i,), out, findings, active, visited)


def render_path(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def parse_yaml(text: str, source: str) -> tuple[Any, dict]:
    """Parse one YAML document; return (value, {key path: line}).

    Raises:
        JobSpecError: not YAML, several documents, or duplicate keys.
    """
    findings: list[Finding] = []
    if len(text) > MAX_SPEC_BYTES:
        raise JobSpecError(source, [Finding(None, "", f"{len(text)} characters; a spec is at most {MAX_SPEC_BYTES} "
                                                      "(a few KiB is usual): is this the right file?")])
    try:
        # The reader checks for unprintable characters already in the constructor.
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise JobSpecError(source, [Finding(None, "", f"not valid YAML: {exc}; remove control characters")]) from exc
    pos: dict = {}
    try:
        node = loader.get_single_node()
        # Aliases are refused on the node graph (linear) before anything walks the value, whose
        # expansion is what makes an alias bomb slow.
        if node is not None:
            _positions(node, (), pos, findings)
        value = loader.construct_document(node) if node is not None else None
    except _Unwalkable as exc:
        raise JobSpecError(source, [exc.finding]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise JobSpecError(source, [Finding(line, "", f"not valid YAML: {problem}; fix the syntax there")]) from exc
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # e.g. a timestamp like 2024-13-45 (ValueError) or a mapping used as a key (TypeError).
        raise JobSpecError(source, [Finding(None, "", f"not valid YAML: {exc}")]) from exc
    finally:
        loader.dispose()
    if findings:
        raise JobSpecError(source, findings)
    return value, pos


def line_of(pos: dict, path: Path_) -> int | None:
    path = tuple(path)
    while path not in pos and path:
        path = path[:-1]
    return pos.get(path)



def kind_of(value: Any) -> str:
    if value is None:
        return "null (empty value)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f"a date {value} (quote it to make it a string)"
    return f"a {type(value).__name__}"


_TYPE_WORDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "object": "a mapping", "array": "a list", "null": "null"}


def _lit(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _expected(schema: dict) -> str:
    """Words for what a subschema accepts."""
    if "description" in schema and (schema.get("pattern") or "anyOf" in schema):
        return schema["description"]
    if "const" in schema:
        return _lit(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(_lit(e) for e in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_expected(s) for s in schema["anyOf"])
    t = schema.get("type")
    words = " or ".join(_TYPE_WORDS[x] for x in t) if isinstance(t, list) else _TYPE_WORDS.get(t, "a value")
    if "minimum" in schema and "maximum" in schema:
        words += f" from {schema['minimum']} to {schema['maximum']}"
    elif "minimum" in schema:
        words += f" >= {schema['minimum']}"
    elif "maximum" in schema:
        words += f" <= {schema['maximum']}"
    if "exclusiveMinimum" in schema:
        words += f" > {schema['exclusiveMinimum']}"
    if "pattern" in schema:
        words += f" matching {schema['pattern']}"
    return words


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def check_keys(value: Any, path: Path_, pos: dict, findings: list) -> bool:
    """YAML allows non-string keys (1:, true:, [a]:); specs do not.  Returns False if any."""
    ok = True
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                findings.append(Finding(line_of(pos, path), render_path(path),
                                        f"key {k!r} is {kind_of(k)}; keys must be strings (quote it)"))
                ok = False
            else:
                ok = check_keys(v, path + (k,), pos, findings) and ok
    elif isinstance(value, list):
        for i, v in enumerate(value):
            ok = check_keys(v, path + (i,), pos, findings) and ok
    return ok


def schema_findings(value: dict, pos: dict, schema: dict = S.JOB_SCHEMA) -> list[Finding]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    findings = []
    for err in validator.iter_errors(value):
        path = tuple(err.absolute_path)
        where = render_path(path)
        kw = err.validator
        if kw == "additionalProperties" and isinstance(err.instance, dict):
            props = err.schema.get("properties", {})
            for key in sorted(set(err.instance) - set(props)):
                valid = ", ".join(sorted(props)) or "none"
                findings.append(Finding(line_of(pos, path + (key,)), render_path(path + (key,)),
                                        f"unknown key; {did_you_mean(key, props)}valid keys here: {valid}"))
            continue
        if kw == "required":
            missing = [k for k in err.validator_value if k not in err.instance]
            for key in missing:
                findings.append(Finding(line_of(pos, path), where,
                                        f"missing required key {key!r}"))
            continue
        if "propertyNames" in err.schema_path:
            key = err.instance
            findings.append(Finding(line_of(pos, path + (key,)), render_path(path + (key,)),
                                    f"{key!r} is not a valid name here; expected {_expected(err.schema)}"))
            continue
        if kw in ("enum", "const"):
            choices = err.validator_value if kw == "enum" else [err.validator_value]
            hint = did_you_mean(err.instance, [c for c in choices if isinstance(c, str)]) \
                if isinstance(err.instance, str) else ""
            findings.append(Finding(line_of(pos, path), where,
                                    f"expected {_expected(err.schema)}; got {kind_of(err.instance)}"
                                    + (f"; {hint.strip()}" if hint else "")))
            continue
        if kw == "minItems":
            findings.append(Finding(line_of(pos, path), where,
                                    f"expected at least {err.validator_value} item(s); got an empty list"))
            continue
        findings.append(Finding(line_of(pos, path), where, f"expected {_expected(err.schema)}; got {kind_of(err.instance)}"))
    # One "required" error per missing key, each carrying the whole list: keep each finding once.
    return list(dict.fromkeys(findings))


def _non_finite(value: Any, path: Path_ = ()) -> Iterable[Path_]:
    """Paths of NaN/Infinity numbers (JSON parsers accept them; a schema's bounds do not catch them)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _non_finite(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _non_finite(v, path + (i,))


def launch_spec_findings(raw: dict, source: str) -> list[str]:
    """Every way ``raw`` differs from ``schema.LAUNCH_SCHEMA`` (the one LaunchSpec schema), as messages."""
    findings = [Finding(None, "", "'program' is required: the argv every rank runs, e.g. [\"python\", \"train.py\"]")
                if f.message == "missing required key 'program'" and not f.path else f
                for f in schema_findings(raw, {}, LAUNCH_SCHEMA)]
    findings += [Finding(None, render_path(p), "expected a finite number; got NaN or Infinity")
                 for p in _non_finite(raw)]
    return [f.render(source) for f in findings]
