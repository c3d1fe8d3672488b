"""AWS's own request limits, checked locally: every request mpirun_kit builds passes here first.

Place in the data flow: the last step before a request leaves this machine.
``targets/sagemaker.build_request`` checks its CreateTrainingJob request and
``stack.request.make_deploy_request`` its CreateChangeSet request with
``validate_request``; both raise one ``SpecError`` listing every problem, so
``submit --dry-run`` and ``stack deploy --dry-run`` already refuse what AWS
would refuse.

Why not botocore's own validator: ``botocore.validate.ParamValidator`` checks
types, required members and minimum values only.  AWS also enforces every
shape's ``max`` (string length, list and map entries, integer range), its
``pattern`` and its ``enum`` -- those refusals ("Member must have length less
than or equal to 256", "Member must satisfy regular expression pattern") come
back from the service after the request was sent.  This module reads the same
botocore service model and checks all of it:

  strings   min/max length, ``pattern`` (matched against the whole value, as the
            service's Java validator does), ``enum``
  lists     min/max entries        maps   min/max entries, keys and values
  integers  min/max                structures  required and unknown members

The model's patterns are Java regular expressions; ``java_pattern`` translates
the constructs they use (``\\p{L}``, ``\\p{Z}``, ``\\p{N}``, ``\\p{Alnum}`` ...)
into Python ``re`` (compiled with ``re.ASCII``: Java's ``\\w``, ``\\d`` and
``\\s`` are ASCII), so no regex dependency is needed.  A pattern using a class
it does not know is an error, found by tests/stack/test_limits.py, which
compiles every pattern of every operation we call.

``DOCUMENTED`` adds limits AWS documents but the model does not carry (the
28-day training runtime, the reserved ``aws:`` tag prefix, CloudFormation's
parameter limits).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from ..errors import SpecError

#: operations whose requests mpirun_kit builds (the tests compile every pattern they reach).
OPERATIONS = (("sagemaker", "CreateTrainingJob"), ("cloudformation", "CreateChangeSet"))

#: longest value shown in a message.
_SHOW = 60
#: how an unresolved stack output reads in a dry run's request (cli/resolve.py ``unresolved_value``).
UNRESOLVED_MARK = "${stack:"


@dataclass(frozen=True)
class Violation:
    """One request member outside AWS's limits."""

    path: str
    message: str
    #: the offending string, where the member is one (a dry run's unresolved ``${stack:...}`` is skipped by it).
    value: Any = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# --- Java pattern -> Python re ------------------------------------------------------------

_POSIX = {
    "Alnum": "A-Za-z0-9", "Alpha": "A-Za-z", "Digit": "0-9", "Upper": "A-Z", "Lower": "a-z",
    "XDigit": "0-9a-fA-F", "Space": " \\t\\n\\x0b\\f\\r", "ASCII": "\\x00-\\x7f",
    "Punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
}
_UNICODE_CATEGORIES = ("L", "Lu", "Ll", "Lt", "Lm", "Lo", "N", "Nd", "Nl", "No", "Z", "Zs", "Zl", "Zp",
                       "P", "S", "M")


@functools.lru_cache(maxsize=1)
def _categories() -> tuple[str, ...]:
    """The general category of every code point (one pass, about 0.1 s, once per process)."""
    return tuple(unicodedata.category(chr(cp)) for cp in range(sys.maxunicode + 1))


@functools.lru_cache(maxsize=None)
def _category_ranges(category: str) -> str:
    """Every code point of a Unicode general category (or major class) as ``a-b`` ranges for ``[...]``."""
    out = []
    for inside, group in itertools.groupby(enumerate(_categories()), key=lambda e: e[1].startswith(category)):
        if inside:
            cps = [cp for cp, _ in group]
            start, end = cps[0], cps[-1]
            out.append(_esc(start) if start == end else f"{_esc(start)}-{_esc(end)}")
    return "".join(out)


def _esc(cp: int) -> str:
    return f"\\U{cp:08x}"


def _class_body(name: str) -> str:
    if name in _POSIX:
        return _POSIX[name]
    key = name[2:] if name.startswith("Is") else name
    if key in _UNICODE_CATEGORIES:
        return _category_ranges(key)
    raise SpecError(f"AWS model pattern uses \\p{{{name}}}, which mpirun_kit.stack.limits cannot translate; "
                    "add it to _POSIX or _UNICODE_CATEGORIES")


_PCLASS = re.compile(r"\\([pP])\{([A-Za-z_]+)\}")


@functools.lru_cache(maxsize=None)
def java_pattern(pattern: str) -> re.Pattern[str]:
    """A botocore model pattern (Java syntax) as a compiled Python pattern (use ``fullmatch``).

    Raises:
        SpecError: a ``\\p{..}`` class not translated here (a bug to fix here, not the user's).
    """
    out, i, depth = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            m = _PCLASS.match(pattern, i)
            if m:
                body = _class_body(m.group(2))
                negate = m.group(1) == "P"
                if depth:
                    if negate:
                        raise SpecError(f"AWS model pattern {pattern!r}: \\P{{..}} inside [...] is not translated")
                    out.append(body)
                else:
                    out.append(f"[{'^' if negate else ''}{body}]")
                i = m.end()
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            depth += 1
        elif c == "]" and depth:
            depth -= 1
        out.append(c)
        i += 1
    return re.compile("".join(out), re.ASCII)


# --- limits AWS documents beyond the model ---------------------------------------------------

def _max_runtime(value: Any) -> str | None:
    # SageMaker: "The maximum value is 28 days" (StoppingCondition.MaxRuntimeInSeconds).
    return None if not isinstance(value, int) or value <= 28 * 86400 else \
        f"{value} s is over SageMaker's limit of 28 days ({28 * 86400} s)"


def _tag_key(value: Any) -> str | None:
    # Tagging rules: the aws: prefix is reserved for AWS's own tags.
    return f"{_show(value)} starts with 'aws:', which AWS reserves; choose another key" \
        if isinstance(value, str) and value.lower().startswith("aws:") else None


def _cfn_parameter_value(value: Any) -> str | None:
    # CloudFormation quotas: a parameter value is at most 4,096 bytes.
    return f"{len(value.encode())} bytes, over CloudFormation's 4096-byte parameter value limit" \
        if isinstance(value, str) and len(value.encode()) > 4096 else None


def _cfn_parameters(value: Any) -> str | None:
    # CloudFormation quotas: at most 200 parameters per template.
    return f"{len(value)} parameters, over CloudFormation's limit of 200" \
        if isinstance(value, list) and len(value) > 200 else None


#: (service, shape name) -> extra check returning a message or None.
DOCUMENTED: dict[tuple[str, str], Callable[[Any], str | None]] = {
    ("sagemaker", "MaxRuntimeInSeconds"): _max_runtime,
    ("sagemaker", "TagKey"): _tag_key,
    ("cloudformation", "TagKey"): _tag_key,
    ("cloudformation", "ParameterValue"): _cfn_parameter_value,
    ("cloudformation", "Parameters"): _cfn_parameters,
}


# --- the walk --------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _service_model(service: str) -> Any:
    import botocore.session  # only request builders need it

    return botocore.session.get_session().get_service_model(service)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW else text[:_SHOW - 3] + "..."


def _size(path: str, what: str, n: int, lo: int | None, hi: int | None) -> Iterator[Violation]:
    if lo is not None and n < lo:
        yield Violation(path, f"{what}; AWS requires at least {lo}")
    if hi is not None and n > hi:
        yield Violation(path, f"{what}; AWS allows at most {hi}")


def _walk(service: str, shape: Any, value: Any, path: str) -> Iterator[Violation]:
    kind = shape.type_name
    meta = shape.metadata
    lo, hi = meta.get("min"), meta.get("max")
    if kind == "structure":
        if not isinstance(value, Mapping):
            yield Violation(path, f"expected a structure, got {type(value).__name__}")
            return
        for name in shape.required_members:
            if name not in value:
                yield Violation(f"{path}.{name}" if path else name, "required member missing")
        for name, member_value in value.items():
            sub = f"{path}.{name}" if path else str(name)
            if name not in shape.members:
                yield Violation(sub, f"unknown member; {shape.name} has: {', '.join(sorted(shape.members))}")
                continue
            yield from _walk(service, shape.members[name], member_value, sub)
    elif kind == "list":
        if not isinstance(value, (list, tuple)):
            yield Violation(path, f"expected a list, got {type(value).__name__}")
            return
        yield from _size(path, f"{len(value)} entries", len(value), lo, hi)
        for i, item in enumerate(value):
            yield from _walk(service, shape.member, item, f"{path}[{i}]")
    elif kind == "map":
        if not isinstance(value, Mapping):
            yield Violation(path, f"expected a map, got {type(value).__name__}")
            return
        yield from _size(path, f"{len(value)} entries", len(value), lo, hi)
        for k, v in value.items():
            yield from _walk(service, shape.key, k, f"{path} key {_show(k)}")
            yield from _walk(service, shape.value, v, f"{path}[{k!r}]")
    elif kind == "string":
        if not isinstance(value, str):
            yield Violation(path, f"expected a string, got {type(value).__name__} {_show(value)}")
            return
        for v in _size(path, f"{_show(value)} is {len(value)} characters", len(value), lo, hi):
            yield dataclasses.replace(v, value=value)
        if shape.enum and value not in shape.enum:
            yield Violation(path, f"{_show(value)} is not one of: {', '.join(shape.enum)}", value)
        pattern = meta.get("pattern")
        if pattern and not java_pattern(pattern).fullmatch(value):
            yield Violation(path, f"{_show(value)} does not match AWS's pattern {pattern}", value)
    elif kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            yield Violation(path, f"expected an integer, got {type(value).__name__} {_show(value)}")
            return
        if lo is not None and value < lo:
            yield Violation(path, f"{value} is below AWS's minimum {lo}")
        if hi is not None and value > hi:
            yield Violation(path, f"{value} is above AWS's maximum {hi}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            yield Violation(path, f"expected true or false, got {type(value).__name__} {_show(value)}")
    extra = DOCUMENTED.get((service, shape.name))
    if extra is not None:
        message = extra(value)
        if message:
            yield Violation(path, message)


def check_request(service: str, operation: str, params: Mapping[str, Any]) -> tuple[Violation, ...]:
    """Every way ``params`` breaks the limits of ``service``'s ``operation``; empty when it fits."""
    shape = _service_model(service).operation_model(operation).input_shape
    return tuple(_walk(service, shape, params, ""))


def validate_request(service: str, operation: str, params: Mapping[str, Any], *, source: str) -> None:
    """Raise before sending a request AWS would refuse.

    Args:
        source: what built the request (a spec file, a template), named in the message.

    Raises:
        SpecError: one message listing every violation, each with the member path,
            the offending value and the limit.
    """
    # A dry run without AWS leaves stack outputs as ``${stack:...}`` (cli/resolve.py): their values are
    # not known yet, so their limits cannot be checked; everything else is.
    problems = [p for p in check_request(service, operation, params)
                if not (isinstance(p.value, str) and UNRESOLVED_MARK in p.value)]
    if problems:
        raise SpecError(f"{source}: the {operation} request breaks AWS's limits "
                        f"({len(problems)} problem(s)); AWS would refuse it:\n  "
                        + "\n  ".join(str(p) for p in problems))
