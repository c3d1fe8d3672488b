"""Reading a CloudFormation template and checking parameter values against it, locally.

First step of ``mpirun_kit stack deploy``: a path under cfn/ becomes a ``Template``
(raw body + parsed form + parameter definitions), and ``check_parameters`` turns the
``--param K=V`` values into the effective values, or one ``SpecError`` listing every
problem (unknown or missing parameter, AllowedValues, AllowedPattern, Min/Max, the
template's own ``Rules``) -- all before any AWS call.

The small intrinsic evaluator here (Ref to parameters, Fn::Equals/Not/And/Or/If/
Contains, Condition) is shared with rules.py, which checks resource properties for each
parameter choice.  Anything it cannot evaluate locally (GetAtt, Sub, pseudo parameters)
is ``UNKNOWN``: CloudFormation decides those, so a local check never guesses.
"""
from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import SpecError

log = logging.getLogger(__name__)

#: CloudFormation's limit for a template passed inline (TemplateBody).
MAX_TEMPLATE_BODY_BYTES = 51_200


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: a value only CloudFormation can compute (GetAtt, Sub, a parameter without a value).
UNKNOWN = _Sentinel("UNKNOWN")
#: ``!Ref AWS::NoValue``: the property is removed.
NO_VALUE = _Sentinel("NO_VALUE")

_LIST_TYPES = ("CommaDelimitedList", "List<")


@dataclass(frozen=True)
class ParameterDef:
    """One entry of a template's ``Parameters`` section, values kept as CloudFormation strings."""

    name: str
    type: str
    default: str | None = None
    allowed_values: tuple[str, ...] = ()
    allowed_pattern: str | None = None
    constraint_description: str = ""
    description: str = ""
    min_value: float | None = None
    max_value: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    no_echo: bool = False

    @property
    def is_list(self) -> bool:
        return self.type.startswith(_LIST_TYPES)

    @property
    def is_number(self) -> bool:
        return self.type in ("Number", "List<Number>")


@dataclass(frozen=True)
class Template:
    """A template file: what is sent to CloudFormation (``body``) and what is checked here (``parsed``)."""

    path: str
    body: str = field(repr=False)
    parsed: Mapping[str, Any] = field(repr=False, compare=False)
    parameters: tuple[ParameterDef, ...] = ()

    def parameter(self, name: str) -> ParameterDef | None:
        for p in self.parameters:
            if p.name == name:
                return p
        return None

    @property
    def resources(self) -> Mapping[str, Any]:
        return self.parsed.get("Resources") or {}


def cfn_str(value: Any) -> str:
    """A scalar as CloudFormation sees it: YAML ``true`` is the string ``"true"``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _parameter_defs(path: str, raw: Any) -> tuple[ParameterDef, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise SpecError(f"{path}: Parameters must be a mapping of name -> definition, got {type(raw).__name__}")
    defs = []
    for name, spec in raw.items():
        if not isinstance(spec, Mapping) or "Type" not in spec:
            raise SpecError(f"{path}: parameter {name} has no Type; every parameter needs one (e.g. Type: String)")

        def num(key: str) -> float | None:
            return float(spec[key]) if key in spec else None

        defs.append(ParameterDef(
            name=str(name),
            type=str(spec["Type"]),
            default=cfn_str(spec["Default"]) if "Default" in spec else None,
            allowed_values=tuple(cfn_str(v) for v in spec.get("AllowedValues") or ()),
            allowed_pattern=str(spec["AllowedPattern"]) if "AllowedPattern" in spec else None,
            constraint_description=str(spec.get("ConstraintDescription", "")),
            description=str(spec.get("Description", "")).strip(),
            min_value=num("MinValue"),
            max_value=num("MaxValue"),
            min_length=int(spec["MinLength"]) if "MinLength" in spec else None,
            max_length=int(spec["MaxLength"]) if "MaxLength" in spec else None,
            no_echo=cfn_str(spec.get("NoEcho", "false")).lower() == "true",
        ))
    return tuple(defs)


def parse_template(path: str, body: str) -> Template:
    """Parse template text (YAML with CloudFormation tags, or JSON) read from ``path``.

    Raises:
        SpecError: the text is not a template (parse error with its line, no Resources).
    """
    import cfnlint.decode  # heavy (schemas); only the stack commands need it

    parsed, matches = cfnlint.decode.decode_str(body)
    if matches or parsed is None:
        first = matches[0] if matches else None
        where = f"{path}:{first.linenumber}" if first is not None else path
        what = first.message if first is not None else "empty document"
        raise SpecError(f"{where}: not a readable CloudFormation template ({what}); "
                        "expected YAML or JSON with a Resources section")
    if not isinstance(parsed, Mapping) or not isinstance(parsed.get("Resources"), Mapping):
        raise SpecError(f"{path}: no Resources section; a CloudFormation template needs at least one resource")
    return Template(path=path, body=body, parsed=parsed, parameters=_parameter_defs(path, parsed.get("Parameters")))


def load_template(path: str) -> Template:
    """Read and parse a template file.

    Raises:
        SpecError: no such file (the message lists the templates next to it), too big to
            pass inline, or not a template.
    """
    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        try:
            near = sorted(f for f in os.listdir(folder) if f.endswith((".yaml", ".yml", ".json")))
        except OSError:
            near = []
        hint = f"templates in {folder}/: {', '.join(near)}" if near else "the templates are in cfn/ (vpc.yaml, fsx.yaml, efs.yaml, sagemaker-role.yaml)"
        raise SpecError(f"template {path}: no such file; {hint}")
    try:
        with open(path, encoding="utf-8") as f:
            body = f.read()
    except UnicodeDecodeError as exc:
        raise SpecError(f"template {path}: not UTF-8 text (byte {exc.start}); pass a CloudFormation template "
                        "(YAML or JSON), e.g. cfn/vpc.yaml") from exc
    except OSError as exc:
        raise SpecError(f"template {path}: cannot read it ({exc.strerror}); check the path and its "
                        "permissions") from exc
    size = len(body.encode("utf-8"))
    if size > MAX_TEMPLATE_BODY_BYTES:
        raise SpecError(f"template {path}: {size} bytes, over CloudFormation's {MAX_TEMPLATE_BODY_BYTES}-byte "
                        "limit for an inline template; split it into smaller stacks")
    return parse_template(path, body)


# --- intrinsic evaluation ---------------------------------------------------------------

def is_intrinsic(node: Any) -> bool:
    return isinstance(node, Mapping) and len(node) == 1 and next(iter(node)) in _FUNCTIONS


def evaluate(node: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    """Evaluate a template node against parameter ``values`` (name -> str, or list for list types).

    Returns plain values where the evaluator knows the answer, ``NO_VALUE`` for
    ``AWS::NoValue`` and ``UNKNOWN`` where only CloudFormation does.  Non-intrinsic
    mappings and lists are evaluated element-wise, dropping ``NO_VALUE`` entries.
    """
    if isinstance(node, Mapping):
        if is_intrinsic(node):
            (fn, arg), = node.items()
            return _FUNCTIONS[fn](arg, values, conditions)
        out = {}
        for k, v in node.items():
            r = evaluate(v, values, conditions)
            if r is not NO_VALUE:
                out[str(k)] = r
        return out
    if isinstance(node, list):
        return [r for r in (evaluate(v, values, conditions) for v in node) if r is not NO_VALUE]
    return node


def evaluate_condition(name: str, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    """True, False or UNKNOWN for a named condition."""
    if name not in conditions:
        return UNKNOWN
    return _truth(evaluate(conditions[name], values, conditions))


def _truth(v: Any) -> Any:
    if v is UNKNOWN or isinstance(v, bool):
        return v
    return cfn_str(v).lower() == "true" if isinstance(v, str) else UNKNOWN


def _fn_ref(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    if arg == "AWS::NoValue":
        return NO_VALUE
    return values.get(str(arg), UNKNOWN)


def _scalar_or_list(v: Any) -> Any:
    if isinstance(v, list):
        return [cfn_str(x) for x in v]
    return cfn_str(v)


def _fn_equals(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    if not isinstance(arg, list) or len(arg) != 2:
        return UNKNOWN
    a, b = (evaluate(x, values, conditions) for x in arg)
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    return _scalar_or_list(a) == _scalar_or_list(b)


def _fn_not(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    v = _truth(evaluate(arg[0] if isinstance(arg, list) and arg else arg, values, conditions))
    return UNKNOWN if v is UNKNOWN else not v


def _fn_and(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    results = [_truth(evaluate(x, values, conditions)) for x in arg]
    if any(r is False for r in results):
        return False
    return UNKNOWN if any(r is UNKNOWN for r in results) else True


def _fn_or(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    results = [_truth(evaluate(x, values, conditions)) for x in arg]
    if any(r is True for r in results):
        return True
    return UNKNOWN if any(r is UNKNOWN for r in results) else False


def _fn_if(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    if not isinstance(arg, list) or len(arg) != 3:
        return UNKNOWN
    c = evaluate_condition(str(arg[0]), values, conditions)
    if c is UNKNOWN:
        return UNKNOWN
    return evaluate(arg[1] if c else arg[2], values, conditions)


def _fn_condition(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    return evaluate_condition(str(arg), values, conditions)


def _fn_contains(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    if not isinstance(arg, list) or len(arg) != 2:
        return UNKNOWN
    seq, item = (evaluate(x, values, conditions) for x in arg)
    if seq is UNKNOWN or item is UNKNOWN or not isinstance(seq, list):
        return UNKNOWN
    return cfn_str(item) in [cfn_str(x) for x in seq]


def _fn_unknown(arg: Any, values: Mapping[str, Any], conditions: Mapping[str, Any]) -> Any:
    return UNKNOWN


_FUNCTIONS = {
    "Ref": _fn_ref,
    "Fn::Equals": _fn_equals,
    "Fn::Not": _fn_not,
    "Fn::And": _fn_and,
    "Fn::Or": _fn_or,
    "Fn::If": _fn_if,
    "Condition": _fn_condition,
    "Fn::Contains": _fn_contains,
    # Values CloudFormation computes at deploy time: opaque here, but present.
    **{fn: _fn_unknown for fn in (
        "Fn::GetAtt", "Fn::Sub", "Fn::Join", "Fn::Select", "Fn::Split", "Fn::GetAZs", "Fn::Cidr",
        "Fn::ImportValue", "Fn::FindInMap", "Fn::Base64", "Fn::Length", "Fn::ToJsonString",
        "Fn::EachMemberEquals", "Fn::EachMemberIn", "Fn::RefAll", "Fn::ValueOf", "Fn::ValueOfAll")},
}


# --- parameter checks ---------------------------------------------------------------------

def parameter_values(template: Template, given: Mapping[str, str]) -> dict[str, Any]:
    """Given values plus defaults, as the evaluator wants them (lists split on commas)."""
    out: dict[str, Any] = {}
    for p in template.parameters:
        raw = given.get(p.name, p.default)
        if raw is None:
            continue
        out[p.name] = [x.strip() for x in raw.split(",")] if p.is_list and raw != "" else ([] if p.is_list else raw)
    return out


def _value_problems(p: ParameterDef, value: str) -> list[str]:
    shown = "****" if p.no_echo else repr(value)
    hint = f" ({p.constraint_description})" if p.constraint_description else ""
    items = [x.strip() for x in value.split(",")] if p.is_list else [value]
    problems = []
    for item in items:
        if p.is_number:
            try:
                number = float(item)
                if not math.isfinite(number):
                    raise ValueError(item)
            except ValueError:
                problems.append(f"parameter {p.name}={shown} is not a number; expected {p.type}")
                continue
            if p.min_value is not None and number < p.min_value:
                problems.append(f"parameter {p.name}={shown} is below MinValue {cfn_str(p.min_value)}{hint}")
            if p.max_value is not None and number > p.max_value:
                problems.append(f"parameter {p.name}={shown} is above MaxValue {cfn_str(p.max_value)}{hint}")
        if p.allowed_values and not _allowed(p, item):
            problems.append(f"parameter {p.name}={shown} is not allowed; expected one of: "
                            f"{', '.join(repr(v) for v in p.allowed_values)}")
        # CloudFormation matches AllowedPattern against the whole value.
        if p.allowed_pattern is not None and not re.fullmatch(p.allowed_pattern, item):
            problems.append(f"parameter {p.name}={shown} does not match AllowedPattern "
                            f"{p.allowed_pattern}{hint}")
    if p.min_length is not None and len(value) < p.min_length:
        problems.append(f"parameter {p.name}={shown} is shorter than MinLength {p.min_length}{hint}")
    if p.max_length is not None and len(value) > p.max_length:
        problems.append(f"parameter {p.name}={shown} is longer than MaxLength {p.max_length}{hint}")
    return problems


def _allowed(p: ParameterDef, item: str) -> bool:
    if item in p.allowed_values:
        return True
    if p.is_number:  # "1200" and "1200.0" are the same number
        try:
            return any(float(item) == float(v) for v in p.allowed_values)
        except ValueError:
            return False
    return False


def rule_violations(template: Template, values: Mapping[str, Any]) -> list[str]:
    """The ``Rules`` section's failed assertions (their AssertDescription), evaluated locally.

    A rule whose condition or assertion cannot be evaluated here is left to CloudFormation.
    """
    conditions = template.parsed.get("Conditions") or {}
    failed = []
    for name, rule in (template.parsed.get("Rules") or {}).items():
        if not isinstance(rule, Mapping):
            continue
        if "RuleCondition" in rule:
            applies = _truth(evaluate(rule["RuleCondition"], values, conditions))
            if applies is not True:
                if applies is UNKNOWN:
                    log.debug("rule %s: condition not decidable locally; CloudFormation checks it", name)
                continue
        for assertion in rule.get("Assertions") or ():
            ok = _truth(evaluate(assertion.get("Assert"), values, conditions))
            if ok is False:
                failed.append(f"rule {name}: {assertion.get('AssertDescription') or 'assertion failed'}")
    return failed


def check_parameters(template: Template, given: Mapping[str, str], previous: Mapping[str, str] | None = None, *,
                     missing_ok: bool = False) -> dict[str, Any]:
    """Check ``--param`` values against the template; return the effective values.

    Every parameter without a Default must be given, unless the stack already has a value for it
    (``previous``: an update keeps it, as ``--param``'s help says), or ``missing_ok`` (the CLI's
    check before it has asked AWS whether the stack exists; the full check follows).

    Raises:
        SpecError: one message listing every problem found, each with the offending
            value and what was expected.
    """
    problems = []
    known = {p.name for p in template.parameters}
    for name in given:
        if name not in known:
            problems.append(f"unknown parameter {name!r}; {template.path} has: {', '.join(sorted(known)) or 'no parameters'}")
    for p in template.parameters:
        if p.name in given:
            problems.extend(_value_problems(p, given[p.name]))
        elif p.default is None and p.name not in (previous or {}):
            if missing_ok:
                continue
            what = f" ({p.description})" if p.description else ""
            problems.append(f"missing required parameter {p.name}{what}; pass --param {p.name}=VALUE")
    effective = {**{k: v for k, v in (previous or {}).items() if k in known}, **given}
    values = parameter_values(template, effective)
    complete = all(p.name in effective or p.default is not None for p in template.parameters)
    if not problems and complete:
        problems.extend(rule_violations(template, values))
    if problems:
        raise SpecError(f"{template.path}: invalid parameters:\n  " + "\n  ".join(problems))
    return values
