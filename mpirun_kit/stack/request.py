"""The deploy plan: a pure, printable value built from a template and ``--param`` values.

``make_deploy_request`` runs every local check (stack name, parameters, the template's
Rules, our rules.py) and works out the IAM capabilities the template needs;
deploy.py then executes the request against CloudFormation.  ``--dry-run`` prints
``DeployRequest.render()`` and stops here, so it needs neither network nor credentials.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import SpecError
from .rules import check_template
from .template import Template, check_parameters

_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")
_CHANGE_SET_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")
_IAM_TYPES = ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::InstanceProfile",
              "AWS::IAM::User", "AWS::IAM::Group", "AWS::IAM::AccessKey", "AWS::IAM::UserToGroupAddition")
#: a resource with one of these names set needs CAPABILITY_NAMED_IAM.
_IAM_NAME_PROPERTIES = ("RoleName", "ManagedPolicyName", "InstanceProfileName", "UserName", "GroupName")


def check_stack_name(name: str) -> str:
    """CloudFormation's stack name rule, checked before any call.

    Raises:
        SpecError: the name with what a valid one looks like.
    """
    if not _STACK_NAME.fullmatch(name):
        raise SpecError(f"stack name {name!r} is not valid; expected a letter, then letters, digits "
                        "or hyphens, at most 128 characters (e.g. mrk-vpc)")
    return name


def required_capabilities(template: Template) -> tuple[str, ...]:
    """The ``Capabilities`` acknowledgement the template's resources need."""
    caps: list[str] = []
    resources = [r for r in template.resources.values() if isinstance(r, Mapping)]
    iam = [r for r in resources if r.get("Type") in _IAM_TYPES]
    if iam:
        named = any(k in (r.get("Properties") or {}) for r in iam for k in _IAM_NAME_PROPERTIES)
        caps.append("CAPABILITY_NAMED_IAM" if named else "CAPABILITY_IAM")
    if template.parsed.get("Transform") or any(r.get("Type") == "AWS::CloudFormation::Macro" for r in resources):
        caps.append("CAPABILITY_AUTO_EXPAND")
    return tuple(caps)


@dataclass(frozen=True)
class DeployRequest:
    """Everything ``stack deploy`` sends; nothing here is computed at execution time."""

    stack_name: str
    template_path: str
    change_set_name: str
    #: values given on the command line, checked against the template.
    parameters: tuple[tuple[str, str], ...]
    #: every parameter the template declares (the rest are defaults or, on update, kept).
    template_parameters: tuple[str, ...]
    capabilities: tuple[str, ...]
    no_echo: frozenset[str] = frozenset()
    template_body: str = field(default="", repr=False)
    #: turn on termination protection once the stack exists (never turned off here).
    termination_protection: bool = False

    def api_parameters(self, existing: Mapping[str, str] | None) -> list[dict[str, Any]]:
        """``Parameters`` for CreateChangeSet.

        Given values are sent as such.  On an update (``existing``: the stack's current
        parameters) a parameter not given keeps its current value, as ``aws cloudformation
        deploy`` does, so an update never silently resets an earlier choice to its default.
        """
        given = dict(self.parameters)
        out: list[dict[str, Any]] = [{"ParameterKey": k, "ParameterValue": v} for k, v in self.parameters]
        if existing:
            out += [{"ParameterKey": k, "UsePreviousValue": True}
                    for k in self.template_parameters if k not in given and k in existing]
        return out

    def api_request(self, *, create: bool, existing: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The CreateChangeSet arguments (deploy.py sends exactly these)."""
        kwargs: dict[str, Any] = dict(
            StackName=self.stack_name, ChangeSetName=self.change_set_name,
            ChangeSetType="CREATE" if create else "UPDATE", TemplateBody=self.template_body,
            Parameters=self.api_parameters(existing), Description=f"mpirun_kit stack deploy {self.template_path}")
        if self.capabilities:
            kwargs["Capabilities"] = list(self.capabilities)
        return kwargs

    def render(self) -> str:
        """The plan as ``--dry-run`` prints it."""
        lines = [
            f"stack:        {self.stack_name}",
            f"template:     {self.template_path}",
            f"change set:   {self.change_set_name} (CREATE if the stack does not exist, else UPDATE)",
            f"capabilities: {', '.join(self.capabilities) or '(none)'}",
            f"termination protection: {'on after deploy' if self.termination_protection else 'unchanged'}",
            "parameters:",
        ]
        given = dict(self.parameters)
        for name in self.template_parameters:
            if name in given:
                shown = "****" if name in self.no_echo else given[name]
                lines.append(f"  {name} = {shown}")
            else:
                lines.append(f"  {name}: default on create, current value on update")
        return "\n".join(lines)


def make_deploy_request(stack_name: str, template: Template, given: Mapping[str, str],
                        change_set_name: str, *, termination_protection: bool = False,
                        previous: Mapping[str, str] | None = None, missing_ok: bool = False) -> DeployRequest:
    """Check everything that can be checked locally and build the request.

    Args:
        stack_name: the stack to create or update.
        template: from ``load_template``.
        given: ``--param`` values, name -> value.
        change_set_name: chosen by the caller (the CLI uses the time), so the request is reproducible.
        termination_protection: enable the stack's termination protection after the deploy
            (``stack deploy --termination-protection``; the VPC and FSx stacks hold what other
            stacks and running jobs depend on).
        previous: the existing stack's parameter values (an update): a required parameter not
            given keeps its value (sent as UsePreviousValue), and the rules see it.
        missing_ok: accept missing required parameters (a check before the stack was looked up).

    Raises:
        SpecError: bad stack or change set name, bad parameters (all listed), or a
            template that breaks our rules for these values.
    """
    check_stack_name(stack_name)
    if not _CHANGE_SET_NAME.fullmatch(change_set_name):
        raise SpecError(f"change set name {change_set_name!r} is not valid; expected a letter, then letters, "
                        "digits or hyphens, at most 128 characters")
    check_parameters(template, given, previous, missing_ok=missing_ok)
    effective = {**{k: v for k, v in (previous or {}).items() if k in {p.name for p in template.parameters}},
                 **given}
    complete = all(p.name in effective or p.default is not None for p in template.parameters)
    findings = check_template(template, effective) if complete else ()
    if findings:
        raise SpecError(f"{template.path}: breaks mpirun_kit's template rules with these parameters:\n  "
                        + "\n  ".join(str(f) for f in findings))
    request = DeployRequest(
        stack_name=stack_name,
        template_path=template.path,
        change_set_name=change_set_name,
        parameters=tuple(sorted(given.items())),
        template_parameters=tuple(p.name for p in template.parameters),
        capabilities=required_capabilities(template),
        no_echo=frozenset(p.name for p in template.parameters if p.no_echo),
        template_body=template.body,
        termination_protection=termination_protection,
    )
    from .limits import validate_request

    validate_request("cloudformation", "CreateChangeSet", request.api_request(create=True), source=template.path)
    return request


def parse_param_args(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["K=V", ...]`` from ``--param`` into a dict; the value may contain ``=`` and commas.

    Raises:
        SpecError: an item without ``=``, an empty key, or a key given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--param {item!r}: expected KEY=VALUE (e.g. --param CreateNatGateway=false)")
        key = key.strip()
        if key in out:
            raise SpecError(f"--param {key} given twice ({out[key]!r} and {value!r}); give it once")
        out[key] = value
    return out
