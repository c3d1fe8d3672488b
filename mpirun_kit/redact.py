"""Redaction: the one place that decides what counts as a secret and hides it in everything shown.

Place in the data flow: every printer and request builder passes what it shows through here
before it leaves the process -- the plan's text and JSON (``plan/launch_plan.py``,
``plan/jobplan.py``), dry-run requests and shipped files (``targets/base.py``, the SageMaker
request printer), the failure file and FailureReason (``exec/result.py``) and log records
(``cli/main.py`` installs ``RedactingFilter`` on its handler).  To show something new, call
one of these functions; never write another pattern elsewhere.

What is a secret: a *name* that looks secret (``is_secret``: SECRET, TOKEN, PASSWORD, PASSWD,
KEY, CREDENTIAL anywhere in it, or an AWS credential variable), and then its value, in any of
the shapes values travel in:

* ``(name, value)`` pairs and ``{name: value}`` maps (env, SageMaker Environment);
* argv: ``NAME=VALUE``, ``--api-key=VALUE`` and the two-token ``--password VALUE``;
* free text (output lines, failure text, logs): the same three forms inside a line, plus any
  exact value the caller knows to be secret (``known``: the plan's secret env values).

Over-redaction is accepted (``--tokenizer bert`` shows ``--tokenizer ***``); a leak is not.
Only what is *shown* is redacted: the launcher runs and sends the real values.

Stdlib only, at the bottom of the layers beside ``errors.py`` (docs/architecture.md, Layering):
spec/ (a secret-looking env name in a job file), plan/, exec/ and targets/ all ask it.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Iterable, Sequence

REDACTED = "***"
AWS_CREDENTIALS: frozenset[str] = frozenset({
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
})
_SECRET_WORDS = r"SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIAL"
_SECRET_RE = re.compile(_SECRET_WORDS, re.IGNORECASE)
# In free text: NAME=VALUE / --flag=VALUE, and --flag VALUE, for secret-looking names.
_ASSIGN_RE = re.compile(r"(?P<name>--?[A-Za-z][\w.-]*|\b[A-Za-z_][\w.-]*)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&|]+)")
_FLAG_RE = re.compile(r"(?P<name>(?<![\w-])--?[A-Za-z][\w.-]*)(?P<sep>[ \t]+)(?P<value>\"[^\"]*\"|'[^']*'|[^\s-][^\s]*)")
#: values shorter than this are not replaced by exact match in text (a 1-character "secret" would blank everything).
MIN_KNOWN_LEN = 4


def is_secret(name: str) -> bool:
    """Whether ``name`` (an env var, a flag with its dashes, a request key) looks like it holds a secret."""
    return bool(_SECRET_RE.search(name)) or name in AWS_CREDENTIALS


def redact_pairs(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` pairs with secret-looking values replaced by ``***``."""
    return tuple((n, REDACTED if is_secret(n) else v) for n, v in pairs)


def redact_arg(arg: str) -> str:
    """One argv item with the value of a secret-looking ``NAME=VALUE`` / ``--name=VALUE`` replaced."""
    name, sep, _ = arg.partition("=")
    return f"{name}{sep}{REDACTED}" if sep and is_secret(name) else arg


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv with every secret value replaced: ``NAME=V``, ``--flag=V`` and the two-token ``--flag V``."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        shown = redact_arg(arg)
        if shown == arg and arg.startswith("-") and "=" not in arg and is_secret(arg.lstrip("-")):
            hide_next = True
        out.append(shown)
    return out


def redact_text(text: str, known: Iterable[str] = ()) -> str:
    """Free text (output lines, failure text, a log message) with secrets replaced.

    Args:
        text: what is about to be shown or stored.
        known: exact secret values to hide wherever they appear (e.g. the plan's secret env values).
    """
    for value in sorted({v for v in known if v and len(v) >= MIN_KNOWN_LEN}, key=len, reverse=True):
        text = text.replace(value, REDACTED)

    def assign(m: re.Match) -> str:
        return f"{m['name']}={REDACTED}" if is_secret(m["name"]) else m[0]

    def flag(m: re.Match) -> str:
        return f"{m['name']}{m['sep']}{REDACTED}" if is_secret(m["name"].lstrip("-")) else m[0]

    return _FLAG_RE.sub(flag, _ASSIGN_RE.sub(assign, text))


#: request keys whose value is an argv list (LaunchSpec, plans, SageMaker container overrides).
ARGV_KEYS = frozenset({"program", "argv", "mpi_options", "ContainerEntrypoint", "ContainerArguments"})


def redact_value(value: Any, _key: str | None = None) -> Any:
    """A copy of a request or document with secret values replaced by ``***``.

    Handles the shapes requests carry: ``{NAME: value}`` maps (SageMaker Environment),
    ``[NAME, value]`` pairs (LaunchSpec.env), argv lists under ``ARGV_KEYS``, strings holding
    JSON (the serialized LaunchSpec in HyperParameters, a shipped spec file) and any other
    string as free text (remote shell commands).
    """
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(v, str) and is_secret(str(k)) else redact_value(v, str(k)))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and all(isinstance(x, str) for x in value) and is_secret(value[0]):
            return [value[0], REDACTED]
        if _key in ARGV_KEYS and all(isinstance(x, str) for x in value):
            return redact_argv(value)
        return [redact_value(v) for v in value]
    if isinstance(value, str):
        if value.lstrip().startswith("{"):
            try:
                parsed = json.loads(value)
            except ValueError:
                return redact_text(value)
            return json.dumps(redact_value(parsed), sort_keys=True) + ("\n" if value.endswith("\n") else "")
        return redact_text(value)
    return value


class RedactingFilter(logging.Filter):
    """A handler filter: every record's message goes through ``redact_text`` before it is written."""

    def __init__(self, known: Iterable[str] = ()):
        super().__init__()
        self.known = tuple(known)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: let logging report it as it would
            return True
        shown = redact_text(message, self.known)
        if shown != message:
            record.msg, record.args = shown, None
        return True
