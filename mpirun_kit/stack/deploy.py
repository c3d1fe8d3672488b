"""Executing stack plans against CloudFormation: deploy through a change set, delete, list.

Input is a ``DeployRequest`` (request.py, already checked locally) and an injected
boto3 CloudFormation client; waits run on an injected ``Clock`` under a deadline.
Flow of ``deploy``:

  describe stack -> CREATE or UPDATE change set -> wait for it -> "no changes" = done
  -> show the changes -> confirm -> execute -> print new stack events until the stack
  settles -> outputs, or the first failing resource and its reason (StackFailedError).

People see progress through ``report`` (one line at a time); nothing here prints.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from ..core.clock import Clock, Deadline
from ..errors import ClusterError
from .aws import StackNotFoundError, call
from .events import DEAD_STATES, FAILURE_STATES, STUCK_STATES, SUCCESS_STATES, StackEvent, first_failure
from .outputs import describe_stack, outputs_of
from .request import DeployRequest, check_stack_name

log = logging.getLogger(__name__)

#: CloudFormation's reasons for a change set with nothing to do (AWS and moto wording).
_NO_CHANGE_MARKERS = ("didn't contain changes", "No updates are to be performed")
#: a line on the terminal at least this often while nothing else happens.
HEARTBEAT_S = 30.0


class StackFailedError(ClusterError):
    """The stack operation failed and (where CloudFormation could) rolled back."""

    def __init__(self, message: str, stack_name: str, status: str, failure: StackEvent | None) -> None:
        super().__init__(message)
        self.stack_name = stack_name
        self.status = status
        self.failure = failure


class StackTimeoutError(ClusterError):
    """The stack did not settle before the deadline (CloudFormation keeps going)."""


@dataclass(frozen=True)
class Change:
    """One row of a change set."""

    action: str
    logical_id: str
    resource_type: str
    replacement: str = ""
    physical_id: str = ""

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> "Change":
        rc = raw.get("ResourceChange") or {}
        return cls(action=str(rc.get("Action", "?")), logical_id=str(rc.get("LogicalResourceId", "?")),
                   resource_type=str(rc.get("ResourceType", "?")),
                   replacement=str(rc.get("Replacement") or ""),
                   physical_id=str(rc.get("PhysicalResourceId") or ""))


def render_changes(changes: tuple[Change, ...]) -> str:
    """The change set as a table (Replacement 'True' is what destroys data: it is spelled out)."""
    if not changes:
        return "(no resource changes)"
    rows = [("ACTION", "RESOURCE", "TYPE", "REPLACEMENT", "PHYSICAL ID")]
    rows += [(c.action, c.logical_id, c.resource_type, {"True": "yes (replaced)", "Conditional": "maybe"}
              .get(c.replacement, c.replacement or "-"), c.physical_id or "-") for c in changes]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


@dataclass(frozen=True)
class DeployResult:
    """What a deploy did: ``outcome`` is created | updated | no-changes | declined."""

    stack_name: str
    outcome: str
    changes: tuple[Change, ...] = ()
    outputs: tuple[tuple[str, str], ...] = ()


def _existing(client: Any, stack_name: str) -> dict[str, Any] | None:
    try:
        return describe_stack(stack_name, client)
    except StackNotFoundError:
        return None


def _event_page(client: Any, stack_name: str, token: str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"StackName": stack_name}
    if token:
        kwargs["NextToken"] = token
    return call(client, "describe_stack_events", stack_name, **kwargs)


def _new_events(client: Any, stack_name: str, seen: set[str]) -> list[StackEvent]:
    """Events not seen yet, oldest first; pages until it reaches a seen one."""
    fresh: list[StackEvent] = []
    token = None
    while True:
        page = _event_page(client, stack_name, token)
        for raw in page.get("StackEvents") or ():
            ev = StackEvent.from_api(raw)
            if ev.event_id in seen:
                return fresh[::-1]
            seen.add(ev.event_id)
            fresh.append(ev)
        token = page.get("NextToken")
        if not token:
            return fresh[::-1]


def wait_for_stack(client: Any, stack_name: str, *, seen: set[str], clock: Clock, timeout_s: float | None,
                   poll_s: float, report: Callable[[str], None], action: str) -> tuple[str, list[StackEvent]]:
    """Print new events until the stack is in a final state; return (status, events seen).

    Raises:
        StackTimeoutError: still in progress at the deadline.
    """
    deadline = Deadline(clock, timeout_s)
    events: list[StackEvent] = []
    last_line = clock.monotonic()
    while True:
        fresh = _new_events(client, stack_name, seen)
        for ev in fresh:
            report("  " + ev.line())
        events += fresh
        if fresh:
            last_line = clock.monotonic()
        try:
            status = str(describe_stack(stack_name, client).get("StackStatus", "?"))
        except StackNotFoundError:
            if action == "delete":
                return "DELETE_COMPLETE", events
            raise
        if status in SUCCESS_STATES or status in FAILURE_STATES or status == "DELETE_COMPLETE":
            return status, events
        if deadline.expired():
            raise StackTimeoutError(
                f"stack {stack_name!r} still {status} after {deadline.elapsed():.0f} s (--timeout); "
                "CloudFormation carries on: check again with `mpirun_kit stack list`, or wait longer with a "
                "larger --timeout")
        if clock.monotonic() - last_line >= HEARTBEAT_S:
            report(f"  ... {stack_name}: {status} ({deadline.elapsed():.0f} s)")
            last_line = clock.monotonic()
        clock.sleep(min(poll_s, deadline.remaining()))


def _wait_change_set(client: Any, request: DeployRequest, change_set_id: str, *, clock: Clock,
                     timeout_s: float | None, poll_s: float) -> dict[str, Any]:
    deadline = Deadline(clock, timeout_s)
    while True:
        cs = call(client, "describe_change_set", request.stack_name, ChangeSetName=change_set_id)
        if cs.get("Status") not in ("CREATE_PENDING", "CREATE_IN_PROGRESS"):
            changes = list(cs.get("Changes") or ())
            token = cs.get("NextToken")
            while token:
                more = call(client, "describe_change_set", request.stack_name,
                            ChangeSetName=change_set_id, NextToken=token)
                changes += more.get("Changes") or ()
                token = more.get("NextToken")
            return {**cs, "Changes": changes}
        if deadline.expired():
            raise StackTimeoutError(f"change set {request.change_set_name} of stack {request.stack_name!r} still "
                                    f"{cs.get('Status')} after {deadline.elapsed():.0f} s; try again later")
        clock.sleep(min(poll_s, deadline.remaining()))


def _discard(client: Any, request: DeployRequest, change_set_id: str, created: bool) -> None:
    """Delete a change set we will not execute; for a CREATE, also the empty stack it made."""
    call(client, "delete_change_set", request.stack_name, ChangeSetName=change_set_id)
    if created:
        call(client, "delete_stack", request.stack_name, StackName=request.stack_name)


#: the stack tag naming who deployed a stack (``deploy`` sets it; ``deploy`` and ``stack down`` check it).
OWNER_TAG = "mpirun-kit-owner"


def owner_of(stack: dict[str, Any]) -> str | None:
    """The stack's owner tag, None when it has none (a stack made before the tag, or by hand)."""
    return next((str(t.get("Value")) for t in stack.get("Tags") or () if t.get("Key") == OWNER_TAG), None)


def check_owner(stack: dict[str, Any], owner: str | None, action: str) -> None:
    """Refuse to ``action`` (update, delete) a stack another person deployed.

    Raises:
        ClusterError: the stack's owner tag names someone other than ``owner``.
    """
    current = owner_of(stack)
    if owner is None or current is None or current == owner:
        return
    from .prefix import default_prefix

    name = stack.get("StackName", "?")
    mine = default_prefix(owner.rsplit('/', 1)[-1].split('@')[0])
    raise ClusterError(f"stack {name} belongs to {current} (its tag {OWNER_TAG}), not to you ({owner}): "
                       f"you would {action} their stack, which every job of theirs uses. Choose a stack prefix of "
                       f"your own (`mpirun_kit stack prefix {mine}`: 'mrk-' in stack names stands for it, so "
                       f"mrk-vpc is then {mine}-vpc), or, if it is yours to take over, pass --take-over")


def deploy(request: DeployRequest, client: Any, *, confirm: Callable[[tuple[Change, ...]], bool],
           report: Callable[[str], None], clock: Clock, timeout_s: float | None = 3600.0,
           poll_s: float = 5.0, owner: str | None = None, take_over: bool = False) -> DeployResult:
    """Create or update ``request.stack_name`` through a change set.

    Args:
        request: from ``make_deploy_request``.
        client: boto3 CloudFormation client (injected).
        confirm: shown the changes after they were reported; False discards the change set.
        report: receives progress lines (the change table, stack events, heartbeats).
        clock: injected time; ``timeout_s`` bounds the change set wait and the stack wait each.
        poll_s: seconds between DescribeStackEvents calls.
        owner: who deploys (the caller's identity); tagged on the stack (OWNER_TAG), and an existing
            stack tagged with another owner is not updated unless ``take_over``.

    Raises:
        StackFailedError: the change set or the stack operation failed; carries the first
            failing resource and its reason.
        StackTimeoutError: no final state before the deadline.
        ClusterError: AWS refused a call or could not be reached.
    """
    name = request.stack_name
    log.debug("deploy plan:\n%s", request.render())
    existing = _existing(client, name)
    status = str(existing.get("StackStatus", "")) if existing else ""
    if status in DEAD_STATES:
        raise StackFailedError(f"stack {name!r} is {status}: its creation failed, and such a stack cannot be "
                               f"updated; delete it with `mpirun_kit stack delete {name}` and deploy again",
                               name, status, None)
    if status in STUCK_STATES:
        raise StackFailedError(f"stack {name!r} is {status}: {_continue_rollback(name)}", name, status, None)
    if status.endswith("_IN_PROGRESS") and status != "REVIEW_IN_PROGRESS":
        raise ClusterError(f"stack {name!r} is busy ({status}); wait for it to finish "
                           "(`mpirun_kit stack list`) and deploy again")
    # REVIEW_IN_PROGRESS: an earlier CREATE change set was never executed; create again.
    create = existing is None or status == "REVIEW_IN_PROGRESS"
    previous = None if create else {p["ParameterKey"]: p.get("ParameterValue", "")
                                    for p in existing.get("Parameters") or ()}  # type: ignore[union-attr]
    if not create and not take_over:
        check_owner(existing or {}, owner, "update")
    kwargs = request.api_request(create=create, existing=previous)
    if owner is not None:  # an update replaces the stack's tags: keep the others
        kept = [t for t in (existing or {}).get("Tags") or () if t.get("Key") != OWNER_TAG]
        kwargs["Tags"] = [*kept, *[t for t in kwargs.get("Tags") or () if t.get("Key") != OWNER_TAG],
                          {"Key": OWNER_TAG, "Value": owner}]
    report(f"{'creating' if create else 'updating'} stack {name} from {request.template_path} "
           f"(change set {request.change_set_name})")
    try:
        created = call(client, "create_change_set", name, **kwargs)
    except ClusterError as exc:
        # Some endpoints refuse a no-op update up front instead of failing the change set.
        if not create and any(m in str(exc) for m in _NO_CHANGE_MARKERS):
            report(f"stack {name}: no changes; it already matches {request.template_path} and these parameters")
            return DeployResult(name, "no-changes", (), tuple(sorted(outputs_of(existing or {}).items())))
        raise
    cs_id = str(created.get("Id") or request.change_set_name)
    cs = _wait_change_set(client, request, cs_id, clock=clock, timeout_s=timeout_s, poll_s=poll_s)
    if cs.get("Status") == "FAILED":
        reason = str(cs.get("StatusReason", ""))
        if any(m in reason for m in _NO_CHANGE_MARKERS):
            call(client, "delete_change_set", name, ChangeSetName=cs_id)
            report(f"stack {name}: no changes; it already matches {request.template_path} and these parameters")
            _protect(client, request, report)
            return DeployResult(name, "no-changes", (), tuple(sorted(outputs_of(existing or {}).items())))
        raise StackFailedError(f"change set {request.change_set_name} of stack {name!r} failed: {reason}; "
                               "fix the template or parameters and deploy again", name, "FAILED", None)
    changes = tuple(Change.from_api(c) for c in cs.get("Changes") or ())
    report(render_changes(changes))
    if not confirm(changes):
        _discard(client, request, cs_id, create)
        report(f"stack {name}: change set discarded, nothing changed")
        return DeployResult(name, "declined", changes)
    seen = {e.event_id for e in (StackEvent.from_api(r) for r in
                                 _event_page(client, name, None).get("StackEvents") or ())}
    call(client, "execute_change_set", name, ChangeSetName=cs_id)
    final, events = wait_for_stack(client, name, seen=seen, clock=clock, timeout_s=timeout_s, poll_s=poll_s,
                                   report=report, action="create" if create else "update")
    if final not in SUCCESS_STATES:
        raise _failed(name, final, events, client)
    _protect(client, request, report)
    outputs = outputs_of(describe_stack(name, client))
    return DeployResult(name, "created" if create else "updated", changes, tuple(sorted(outputs.items())))


def _protect(client: Any, request: DeployRequest, report: Callable[[str], None]) -> None:
    """Termination protection on (CreateChangeSet has no such parameter: it is a separate call)."""
    if request.termination_protection:
        call(client, "update_termination_protection", request.stack_name, StackName=request.stack_name,
             EnableTerminationProtection=True)
        report(f"stack {request.stack_name}: termination protection on (`aws cloudformation "
               f"update-termination-protection --no-enable-termination-protection --stack-name "
               f"{request.stack_name}` before deleting it)")


def _continue_rollback(name: str) -> str:
    return ("an update failed and so did its rollback, and CloudFormation accepts no update until the rollback "
            "finishes; fix what the rollback could not undo (see the stack events), then run `aws cloudformation "
            f"continue-update-rollback --stack-name {name}` (add --resources-to-skip for resources that cannot be "
            "rolled back) and deploy again")


def _failed(name: str, final: str, events: list[StackEvent], client: Any) -> StackFailedError:
    cause = first_failure(events)
    if cause is not None:
        what = f"first failure: {cause.logical_id} ({cause.resource_type}) {cause.status}: {cause.reason or '(no reason given)'}"
    else:
        what = f"reason: {describe_stack(name, client).get('StackStatusReason') or '(none given)'}"
    if final in STUCK_STATES:
        remedy = _continue_rollback(name)
    else:
        remedy = ("Fix the cause and deploy again (a stack that was never created must be deleted first: "
                  f"`mpirun_kit stack delete {name}`)")
    return StackFailedError(f"stack {name!r} ended {final}; {what}. {remedy}", name, final, cause)


def delete(stack_name: str, client: Any, *, report: Callable[[str], None], clock: Clock,
           timeout_s: float | None = 3600.0, poll_s: float = 5.0) -> str:
    """Delete a stack and wait until it is gone; returns the final status.

    Raises:
        StackNotFoundError: no such stack.
        StackFailedError: DELETE_FAILED (with the first resource that could not be deleted).
        StackTimeoutError, ClusterError: as ``deploy``.
    """
    check_stack_name(stack_name)
    stack = describe_stack(stack_name, client)
    # Waiting by id: once deleted, the name no longer resolves.
    stack_id = str(stack.get("StackId") or stack_name)
    seen = {e.event_id for e in (StackEvent.from_api(r) for r in
                                 _event_page(client, stack_id, None).get("StackEvents") or ())}
    report(f"deleting stack {stack_name}")
    call(client, "delete_stack", stack_name, StackName=stack_id)
    final, events = wait_for_stack(client, stack_id, seen=seen, clock=clock, timeout_s=timeout_s,
                                   poll_s=poll_s, report=report, action="delete")
    if final != "DELETE_COMPLETE":
        raise _failed(stack_name, final, events, client)
    return final


@dataclass(frozen=True)
class StackSummary:
    name: str
    status: str
    updated: str
    description: str = ""


def list_stacks(client: Any) -> tuple[StackSummary, ...]:
    """Every stack that exists (not DELETE_COMPLETE), by name."""
    out = []
    token = None
    while True:
        page = call(client, "list_stacks", "*", **({"NextToken": token} if token else {}))
        for s in page.get("StackSummaries") or ():
            if s.get("StackStatus") == "DELETE_COMPLETE":
                continue
            when = s.get("LastUpdatedTime") or s.get("CreationTime")
            out.append(StackSummary(str(s.get("StackName")), str(s.get("StackStatus")),
                                    when.isoformat() if hasattr(when, "isoformat") else str(when or ""),
                                    str(s.get("TemplateDescription") or "")))
        token = page.get("NextToken")
        if not token:
            return tuple(sorted(out, key=lambda s: s.name))


#: the walk-through's stacks in teardown order: each one's dependants first (role, storage, then the VPC).
TEARDOWN_ORDER = ("mrk-role", "mrk-efs", "mrk-fsx", "mrk-vpc")
#: how to delete what a stack leaves behind (DeletionPolicy: Retain), by resource type.
_DELETE_RETAINED = {
    "AWS::EFS::FileSystem": "aws efs delete-file-system --file-system-id {id}",
    "AWS::S3::Bucket": "aws s3 rb s3://{id} --force",
    "AWS::FSx::FileSystem": "aws fsx delete-file-system --file-system-id {id}",
    "AWS::Logs::LogGroup": "aws logs delete-log-group --log-group-name {id}",   # a stack's own group only
    # the recovery points of one file system; each is deleted with `aws backup delete-recovery-point`
    "AWS::Backup::RecoveryPoint": "aws backup list-recovery-points-by-resource --resource-arn {id}",
}
#: what SageMaker writes outside any stack: every training job's CloudWatch logs.
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"


@dataclass(frozen=True)
class Retained:
    """A resource a deleted stack left in place (its template says DeletionPolicy: Retain)."""

    stack_name: str
    logical_id: str
    resource_type: str
    physical_id: str
    #: why it stays (printed after the stack and logical id)
    why: str = "DeletionPolicy Retain, so its data outlives the stack; it keeps billing"

    def delete_command(self, region: str | None) -> str:
        if self.resource_type == "AWS::Logs::LogGroup" and self.physical_id == TRAINING_LOG_GROUP:
            # Every training job of the account and region logs there, every user's: never the group.
            where = f" --region {region}" if region else ""
            return ("keep the group (every training job of this account and region logs there); remove only your "
                    f"own jobs' streams: aws logs delete-log-stream --log-group-name {TRAINING_LOG_GROUP} "
                    f"--log-stream-name JOB/HOST{where} (`aws logs describe-log-streams --log-group-name "
                    f"{TRAINING_LOG_GROUP} --log-stream-name-prefix JOB/` lists them)")
        cmd = _DELETE_RETAINED.get(self.resource_type)
        where = f" --region {region}" if region else ""
        return (cmd.format(id=self.physical_id) + where) if cmd else \
            f"delete {self.resource_type} {self.physical_id} with its service's console or CLI"


def retained_resources(client: Any, stack_name: str) -> tuple[Retained, ...]:
    """The resources of a live stack its template keeps on delete (GetTemplate + DescribeStackResources)."""
    from .template import parse_template

    body = call(client, "get_template", stack_name, StackName=stack_name).get("TemplateBody") or ""
    template = parse_template(f"stack {stack_name}", body if isinstance(body, str) else __import__("json").dumps(body))
    keep = {lid for lid, r in template.resources.items() if isinstance(r, dict) and r.get("DeletionPolicy") == "Retain"}
    if not keep:
        return ()
    rows = call(client, "describe_stack_resources", stack_name, StackName=stack_name).get("StackResources") or ()
    return tuple(Retained(stack_name, str(r.get("LogicalResourceId")), str(r.get("ResourceType")),
                          str(r.get("PhysicalResourceId") or "?")) for r in rows
                 if r.get("LogicalResourceId") in keep)


def left_outside_stacks(kept: tuple[Retained, ...], deleted: tuple[str, ...],
                        stack_arns: dict[str, str]) -> tuple[Retained, ...]:
    """What deleting the stacks leaves that no template names: the automatic backups of every EFS file system
    kept (AWS Backup recovery points, kept by the vault's retention rule) and, once the role stack is gone,
    the training jobs' log group, which SageMaker creates.  ``stack_arns``: stack name -> its StackId (for
    the partition and account of the file systems' ARNs)."""
    out = []
    for k in kept:
        if k.resource_type != "AWS::EFS::FileSystem":
            continue
        parts = stack_arns.get(k.stack_name, "").split(":")
        if len(parts) > 4:
            arn = f"arn:{parts[1]}:elasticfilesystem:{parts[3]}:{parts[4]}:file-system/{k.physical_id}"
            out.append(Retained(k.stack_name, k.logical_id + " backups", "AWS::Backup::RecoveryPoint", arn,
                                "BackupPolicy ENABLED: its automatic backups stay in the vault "
                                "aws/efs/automatic-backup-vault until their retention ends; they bill as backup "
                                "storage"))
    roles = [n for n in deleted if "role" in n]
    if roles:
        out.append(Retained(roles[0], "training logs", "AWS::Logs::LogGroup", TRAINING_LOG_GROUP,
                            "SageMaker writes every training job's logs there, outside any stack; it bills "
                            "for what it stores"))
    return tuple(out)


def training_jobs_in(sm: Any, subnets: set[str]) -> list[str]:
    """Names of the account's InProgress training jobs that run in any of ``subnets`` (``stack down`` refuses
    to delete the network and storage under them)."""
    names, token = [], None
    while True:
        page = call(sm, "list_training_jobs", "(training jobs)", StatusEquals="InProgress", MaxResults=100,
                    **({"NextToken": token} if token else {}))
        for summary in page.get("TrainingJobSummaries") or ():
            desc = call(sm, "describe_training_job", summary["TrainingJobName"],
                        TrainingJobName=summary["TrainingJobName"])
            if subnets & set((desc.get("VpcConfig") or {}).get("Subnets") or ()):
                names.append(summary["TrainingJobName"])
        token = page.get("NextToken")
        if not token:
            return names


def vpc_users(client: Any, ec2: Any, stack_names: tuple[str, ...]) -> list[str]:
    """What outside ``stack_names`` still uses their VPCs, one line each: another stack that imports one of
    their exports, and a network interface in the VPC that none of their resources made (another stack's
    file system, a colleague's instance or endpoint).  ``stack down`` refuses while there is any: deleting
    the VPC fails half-way or leaves that resource unlisted and billing."""
    ours: set[str] = set()
    vpcs: set[str] = set()
    ids: set[str] = set()
    for name in stack_names:
        try:
            ids.add(str(describe_stack(name, client).get("StackId", "")))
        except StackNotFoundError:
            continue
        ours.add(name)
        for r in call(client, "describe_stack_resources", name, StackName=name).get("StackResources") or ():
            pid = str(r.get("PhysicalResourceId") or "")
            if pid:
                ids.add(pid)
                if r.get("ResourceType") == "AWS::EC2::VPC":
                    vpcs.add(pid)
    out = []
    token = None
    while True:
        page = call(client, "list_exports", "(exports)", **({"NextToken": token} if token else {}))
        for e in page.get("Exports") or ():
            if e.get("ExportingStackId") not in ids:
                continue
            try:
                importers = call(client, "list_imports", str(e["Name"]), ExportName=e["Name"]).get("Imports") or ()
            except (ClusterError, StackNotFoundError):
                importers = ()   # not imported: AWS answers "Export ... is not imported by any stack"
            out += [f"stack {i} imports {e['Name']}" for i in importers if i not in ours]
        token = page.get("NextToken")
        if not token:
            break
    nats = sorted(i for i in ids if i.startswith("nat-"))
    if nats:  # a NAT gateway's interface names it in its description on AWS; its own answer says for sure
        for nat in call(ec2, "describe_nat_gateways", ",".join(nats), NatGatewayIds=nats).get("NatGateways") or ():
            ids |= {str(a.get("NetworkInterfaceId")) for a in nat.get("NatGatewayAddresses") or ()}
    if vpcs:
        enis = call(ec2, "describe_network_interfaces", ",".join(sorted(vpcs)),
                    Filters=[{"Name": "vpc-id", "Values": sorted(vpcs)}]).get("NetworkInterfaces") or ()
        for eni in enis:
            text = " ".join(str(eni.get(k) or "") for k in ("Description", "RequesterId"))
            groups = {g.get("GroupId") for g in eni.get("Groups") or ()}
            if eni["NetworkInterfaceId"] in ids or any(i and i in text for i in ids) \
                    or (groups and groups <= ids and not eni.get("Description")):
                continue
            out.append(f"network interface {eni['NetworkInterfaceId']} in {eni.get('VpcId')} "
                       f"({eni.get('Description') or eni.get('InterfaceType') or 'no description'})")
    return out


def stack_subnets(client: Any, stack_names: tuple[str, ...]) -> set[str]:
    """The subnets the stacks that exist create (AWS::EC2::Subnet) or name in their outputs (the file
    system's subnet)."""
    out: set[str] = set()
    for name in stack_names:
        try:
            outputs = outputs_of(describe_stack(name, client))
        except StackNotFoundError:
            continue
        for value in outputs.values():
            out |= {v.strip() for v in str(value).split(",") if v.strip().startswith("subnet-")}
        rows = call(client, "describe_stack_resources", name, StackName=name).get("StackResources") or ()
        out |= {str(r["PhysicalResourceId"]) for r in rows
                if r.get("ResourceType") == "AWS::EC2::Subnet" and r.get("PhysicalResourceId")}
    return out


def teardown(stack_names: tuple[str, ...], client: Any, *, report: Callable[[str], None], clock: Clock,
             timeout_s: float | None = 3600.0, poll_s: float = 5.0,
             owner: str | None = None) -> tuple[tuple[str, ...], tuple[Retained, ...]]:
    """Delete the named stacks that exist, in the order given, termination protection off first.

    Returns (stacks deleted, resources they left behind).  Stops at the first failure
    (a later stack may depend on the one that failed).

    Raises:
        StackFailedError, StackTimeoutError, ClusterError: as ``delete``.
    """
    deleted: list[str] = []
    kept: list[Retained] = []
    for name in stack_names:  # every owner first: nothing is deleted when one stack is another's
        check_stack_name(name)
        try:
            check_owner(describe_stack(name, client), owner, "delete")
        except StackNotFoundError:
            pass
    for name in stack_names:
        try:
            stack = describe_stack(name, client)
        except StackNotFoundError:
            report(f"stack {name}: not there, skipped")
            continue
        if stack.get("EnableTerminationProtection"):
            call(client, "update_termination_protection", name, StackName=name, EnableTerminationProtection=False)
            report(f"stack {name}: termination protection off")
        kept += retained_resources(client, name)
        delete(name, client, report=report, clock=clock, timeout_s=timeout_s, poll_s=poll_s)
        deleted.append(name)
    return tuple(deleted), tuple(kept)
