"""Stack outputs: the bridge from deployed infrastructure to job specs and shells.

The job layer resolves ``${stack:NAME.OutputKey}`` with ``resolve_stack_ref`` (through
``get_outputs``: keep its signature stable); ``stack outputs --env`` prints
``render_env`` so a shell can ``eval`` the same values.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Mapping

from ..errors import SpecError
from .aws import call


class OutputNotFoundError(SpecError):
    """A ``${stack:NAME.Key}`` reference names an output the stack does not have."""


def describe_stack(stack_name: str, client: Any) -> dict[str, Any]:
    """DescribeStacks for one stack.

    Raises:
        StackNotFoundError: no such stack.
        ClusterError: AWS refused or could not be reached.
    """
    stacks = call(client, "describe_stacks", stack_name, StackName=stack_name).get("Stacks") or []
    if not stacks:
        from .aws import StackNotFoundError
        raise StackNotFoundError(stack_name, getattr(getattr(client, "meta", None), "region_name", None))
    return stacks[0]


def outputs_of(stack: Mapping[str, Any]) -> dict[str, str]:
    """OutputKey -> OutputValue of a DescribeStacks entry (pure)."""
    return {str(o["OutputKey"]): str(o.get("OutputValue", "")) for o in stack.get("Outputs") or ()}


def get_outputs(stack_name: str, client: Any) -> dict[str, str]:
    """The outputs of a deployed stack, OutputKey -> OutputValue.

    Args:
        stack_name: the stack's name (or id).
        client: a boto3 CloudFormation client (injected: region and endpoint are the caller's).

    Raises:
        StackNotFoundError: no such stack (a SpecError).
        ClusterError: AWS refused or could not be reached.
    """
    return outputs_of(describe_stack(stack_name, client))


def resolve_stack_ref(stack: str, key: str, client: Any) -> str:
    """The value of ``${stack:STACK.KEY}``.

    Raises:
        OutputNotFoundError: the stack has no output KEY (the message lists those it has).
        StackNotFoundError, ClusterError: as ``get_outputs``.
    """
    outputs = get_outputs(stack, client)
    if key not in outputs:
        have = ", ".join(sorted(outputs)) or "none (is it still being created?)"
        raise OutputNotFoundError(f"${{stack:{stack}.{key}}}: stack {stack!r} has no output {key!r}; "
                                  f"its outputs are: {have}")
    return outputs[key]


def env_name(stack_name: str, key: str) -> str:
    """``MRK_<STACK>_<KEY>``: upper case, anything but letters and digits becomes ``_``."""
    def clean(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9]", "_", s).upper()
    return f"MRK_{clean(stack_name)}_{clean(key)}"


def render_env(stack_name: str, outputs: Mapping[str, str]) -> str:
    """Shell ``export`` lines, values quoted for POSIX shells, sorted by key."""
    return "\n".join(f"export {env_name(stack_name, k)}={shlex.quote(v)}" for k, v in sorted(outputs.items()))


def render_table(outputs: Mapping[str, str]) -> str:
    """A two-column table of outputs for people."""
    if not outputs:
        return "(no outputs)"
    width = max(len(k) for k in outputs)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in sorted(outputs.items()))
