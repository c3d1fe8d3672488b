"""SageMaker sources of cluster facts, as pure parsers.

``parse_resource_config`` reads the dict of ``/opt/ml/input/config/resourceconfig.json``
and ``parse_sm_env`` the ``SM_HOSTS``/``SM_CURRENT_HOST`` fallback.  Reading the files is
``read_json``'s job (the one thin reader); ``discover.py`` decides which source wins.  The
LaunchSpec in hyperparameters.json is spec/'s to parse (``LaunchSpec.from_hyperparameters``):
cluster/ sits below spec/ and never imports it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Collection, Mapping

from ..errors import SpecError
from . import Cluster, Host

RESOURCE_CONFIG = Path("input/config/resourceconfig.json")
HYPERPARAMETERS = Path("input/config/hyperparameters.json")


def read_json(path: Path) -> dict:
    """Load a JSON object from ``path``; a clear SpecError when it is not one, or when another user could
    have written it (trust.py: a plan is built from it)."""
    from .trust import read_plan_input

    try:
        text = read_plan_input(Path(path), "plan input")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: cannot read (not UTF-8 text); expected a JSON file written by the platform") from exc
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror}); expected a JSON file written by the platform") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
                        "fix or regenerate the file") from exc
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a JSON object at top level, got {type(raw).__name__}")
    return raw


def _host_list(value, source: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(h, str) and h for h in value):
        raise SpecError(f"{source}: field '{field}' must be a non-empty list of host names, got {value!r}")
    if any(h.startswith("-") or any(c.isspace() for c in h) for h in value):  # would reach ssh as an option
        raise SpecError(f"{source}: field '{field}' holds {value!r}; a host name has no whitespace and does not "
                        "start with '-'")
    seen: set[str] = set()
    dups = sorted({h for h in value if h in seen or seen.add(h)})
    if dups:
        raise SpecError(f"{source}: field '{field}' lists host(s) {dups} more than once; each host must appear once")
    return tuple(value)


def _check_interface(name: str | None, interfaces: Collection[str] | None, source: str, field: str) -> None:
    if name is not None and interfaces is not None and name not in interfaces:
        raise SpecError(f"{source}: field '{field}' names network interface {name!r}, which this host does not have "
                        f"(it has {sorted(interfaces)}); fix the file or pass the right interface")


def parse_resource_config(raw: Mapping, source: str, interfaces: Collection[str] | None = None) -> Cluster:
    """Turn a resourceconfig.json dict into a Cluster.

    Args:
        raw: the parsed JSON object.
        source: the file it came from, quoted in every error.
        interfaces: this host's interface names; when given, ``network_interface_name``
            must be one of them (None skips the check, e.g. when planning for another host).

    Raises:
        SpecError: a required field is missing or wrong, a host appears twice, the
            current host is not among the hosts, or the interface does not exist here.
    """
    current = raw.get("current_host")
    if not isinstance(current, str) or not current:
        raise SpecError(f"{source}: field 'current_host' must be this host's name (e.g. \"algo-1\"), got {current!r}")
    hosts = _host_list(raw.get("hosts"), source, "hosts")
    if current not in hosts:
        raise SpecError(f"{source}: field 'current_host' is {current!r}, which is not in field 'hosts' {list(hosts)}; "
                        "the file must list this host among the hosts")
    iface = raw.get("network_interface_name")
    if iface is not None and (not isinstance(iface, str) or not iface):
        raise SpecError(f"{source}: field 'network_interface_name' must be an interface name like \"eth0\", got {iface!r}")
    _check_interface(iface, interfaces, source, "network_interface_name")
    groups = []
    for i, g in enumerate(raw.get("instance_groups") or ()):
        if not isinstance(g, Mapping) or not isinstance(g.get("instance_group_name"), str):
            raise SpecError(f"{source}: field 'instance_groups[{i}]' must be an object with 'instance_group_name' "
                            f"and 'hosts', got {g!r}")
        members = _host_list(g.get("hosts"), source, f"instance_groups[{i}].hosts")
        stray = sorted(set(members) - set(hosts))
        if stray:
            raise SpecError(f"{source}: field 'instance_groups[{i}].hosts' names {stray}, which are not in "
                            f"field 'hosts' {list(hosts)}")
        groups.append((g["instance_group_name"], members))
    instance_type = raw.get("current_instance_type")
    return Cluster(
        hosts=tuple(Host(h) for h in hosts),
        current_host=current,
        source=str(source),
        network_interface=iface,
        instance_type=instance_type if isinstance(instance_type, str) else None,
        current_group=raw.get("current_group_name") if isinstance(raw.get("current_group_name"), str) else None,
        instance_groups=tuple(groups),
    )


def parse_sm_env(environ: Mapping[str, str], interfaces: Collection[str] | None = None) -> Cluster | None:
    """The ``SM_HOSTS``/``SM_CURRENT_HOST`` fallback; None when ``SM_HOSTS`` is not set.

    Raises:
        SpecError: SM_HOSTS is not a JSON list of names, or SM_CURRENT_HOST is missing or not in it.
    """
    if "SM_HOSTS" not in environ:
        return None
    try:
        hosts_raw = json.loads(environ["SM_HOSTS"])
    except json.JSONDecodeError as exc:
        raise SpecError(f"environment variable SM_HOSTS: not JSON ({exc.msg}); expected e.g. "
                        "'[\"algo-1\", \"algo-2\"]'") from exc
    raw = {
        "hosts": hosts_raw,
        "current_host": environ.get("SM_CURRENT_HOST"),
        "network_interface_name": environ.get("SM_NETWORK_INTERFACE_NAME") or None,
        "current_instance_type": environ.get("SM_CURRENT_INSTANCE_TYPE"),
    }
    return parse_resource_config(raw, "environment SM_HOSTS/SM_CURRENT_HOST", interfaces)
