"""Cluster facts: which hosts take part, which one this is, and how they talk.

Data flow: discovery (``discover.py``, the one reader of /opt/ml and the
environment) turns a SageMaker resourceconfig, ``SM_HOSTS``/``SM_CURRENT_HOST``,
a hostfile or "this machine alone" into a ``Cluster`` value; ``election.py``
picks the master from it; plan/ combines it with a LaunchSpec into a LaunchPlan.
One host's hardware: ``probe.py`` reads NVML/sysfs/EFA into the values of
``topology.py`` (no I/O there, so plan/ imports them without discovery);
``local.py`` reads this machine's facts for planning a job here.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Host:
    """One host of the job.  ``slots`` is None when the source does not say."""

    name: str
    slots: int | None = None


@dataclass(frozen=True)
class Cluster:
    """Every host of the job, in the source's order, and which one we are."""

    hosts: tuple[Host, ...]
    current_host: str
    #: where these facts came from (a file path or "SM_HOSTS" ...), for messages.
    source: str
    #: the interface the hosts share (resourceconfig network_interface_name).
    network_interface: str | None = None
    instance_type: str | None = None
    current_group: str | None = None
    #: instance group name -> host names (heterogeneous SageMaker clusters).
    instance_groups: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)


from .election import elect_master  # noqa: E402  (needs Host/Cluster defined first)

__all__ = ["Host", "Cluster", "elect_master"]
