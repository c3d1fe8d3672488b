"""Stack events as values: what ``stack deploy`` prints while it waits, and why it failed.

deploy.py fetches events (newest first, paged) and hands them here; everything in this
module is pure, so the progress lines and the root-cause choice are tested as values.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

#: stack states after which nothing more happens.
SUCCESS_STATES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE"})
FAILURE_STATES = frozenset({"CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "UPDATE_FAILED",
                            "UPDATE_ROLLBACK_COMPLETE", "UPDATE_ROLLBACK_FAILED", "DELETE_FAILED",
                            "IMPORT_ROLLBACK_COMPLETE", "IMPORT_ROLLBACK_FAILED"})
#: the state of a failed create: it cannot be updated, only deleted.
DEAD_STATES = frozenset({"ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "ROLLBACK_IN_PROGRESS"})
#: a stack that cannot be updated until ``continue-update-rollback`` finishes its rollback.
STUCK_STATES = frozenset({"UPDATE_ROLLBACK_FAILED"})
#: the stack's own event when a rollback starts; its reason is the cause when no resource failed.
_ROLLBACK_STARTS = ("ROLLBACK_IN_PROGRESS", "UPDATE_ROLLBACK_IN_PROGRESS", "IMPORT_ROLLBACK_IN_PROGRESS")
#: reasons CloudFormation gives resources it stopped because another one failed first.
_CONSEQUENTIAL = ("Resource creation cancelled", "Resource update cancelled", "Resource deletion cancelled")


@dataclass(frozen=True)
class StackEvent:
    """One row of DescribeStackEvents, reduced to what a person needs."""

    event_id: str
    timestamp: str
    logical_id: str
    resource_type: str
    status: str
    reason: str = ""

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> "StackEvent":
        ts = raw.get("Timestamp")
        # moto leaves LogicalResourceId/ResourceType out for resource types it skips.
        return cls(
            event_id=str(raw.get("EventId", "")),
            timestamp=ts.isoformat() if isinstance(ts, datetime) else str(ts or ""),
            logical_id=str(raw.get("LogicalResourceId") or "?"),
            resource_type=str(raw.get("ResourceType") or "?"),
            status=str(raw.get("ResourceStatus") or "?"),
            reason=str(raw.get("ResourceStatusReason") or ""),
        )

    def line(self) -> str:
        """A progress line: time, status, resource, reason."""
        clock = self.timestamp[11:19] if len(self.timestamp) >= 19 else self.timestamp
        reason = f"  {self.reason}" if self.reason else ""
        return f"{clock}  {self.status:<28} {self.logical_id} ({self.resource_type}){reason}"

    @property
    def failed(self) -> bool:
        return self.status.endswith("_FAILED")


def first_failure(events: Iterable[StackEvent]) -> StackEvent | None:
    """The root cause: the earliest failed resource event that is not a cancellation, before the rollback.

    ``events`` in any order; ties keep the API's order.  A resource that fails *during* the
    rollback (a DELETE_FAILED: an ENI still attached, a non-empty bucket) is a consequence, and
    when the cause was stack-level (an empty export, a template error found after creating
    resources) it came first and is carried only by the stack's ROLLBACK_IN_PROGRESS event.
    So: a resource failure before the first rollback start; else that rollback start's reason;
    then any resource failure, then the earliest failure of any kind, then None.
    """
    ordered = sorted(events, key=lambda e: e.timestamp)
    failed = [e for e in ordered if e.failed]
    rollback = next((e for e in ordered if e.resource_type == "AWS::CloudFormation::Stack"
                     and e.status in _ROLLBACK_STARTS and e.reason), None)

    def cause(e: StackEvent) -> bool:
        return not e.reason.startswith(_CONSEQUENTIAL) and e.resource_type != "AWS::CloudFormation::Stack"

    for e in failed:
        if cause(e) and (rollback is None or e.timestamp <= rollback.timestamp):
            return e
    if rollback is not None:
        return rollback
    for e in failed:
        if cause(e):
            return e
    return failed[0] if failed else None
