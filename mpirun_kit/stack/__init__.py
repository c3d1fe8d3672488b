"""CloudFormation stacks for training clusters: templates in cfn/, deployed by ``mpirun_kit stack``.

Data flow: template.py (load + check parameters locally) -> rules.py (our template
rules) -> request.py (``DeployRequest``, the pure plan) -> deploy.py (change set,
events, rollback reason; boto3 client injected) -> outputs.py (``get_outputs``, used by
the job layer for ``${stack:NAME.OutputKey}``).  Only the CLI (cli/stack.py) builds
clients or reads the environment.

Two modules serve every AWS request mpirun_kit builds, not only stacks:
limits.py (AWS's full request limits from botocore's model: lengths, counts,
patterns, enums, documented ranges; run on CreateChangeSet and CreateTrainingJob
requests before they are sent) and infra.py (a SageMaker job checked against the
stacks it names: role reach, key channel, KMS, FSx subnet; run by ``plan``).
"""
from __future__ import annotations

from .aws import StackNotFoundError
from .deploy import (TEARDOWN_ORDER, Change, DeployResult, Retained, StackFailedError, StackSummary,
                     StackTimeoutError, delete, deploy, list_stacks, render_changes, teardown)
from .events import StackEvent, first_failure
from .outputs import OutputNotFoundError, env_name, get_outputs, render_env, resolve_stack_ref
from .request import DeployRequest, make_deploy_request, parse_param_args, required_capabilities
from .rules import Finding, check_template
from .template import Template, check_parameters, load_template, parse_template

__all__ = [
    "TEARDOWN_ORDER", "Change", "DeployRequest", "Retained", "teardown", "DeployResult", "Finding", "OutputNotFoundError", "StackEvent", "StackFailedError",
    "StackNotFoundError", "StackSummary", "StackTimeoutError", "Template", "check_parameters", "check_template",
    "delete", "deploy", "env_name", "first_failure", "get_outputs", "list_stacks", "load_template",
    "make_deploy_request", "parse_param_args", "parse_template", "render_changes", "render_env",
    "required_capabilities", "resolve_stack_ref",
]
