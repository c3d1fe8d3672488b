"""Plain hostfiles (``host slots=N`` per line, Open MPI / DeepSpeed style), parsed purely.

Used outside SageMaker (``mpirun_kit launch --hostfile F``) and by ``discover.py``
when a hostfile is given.  Comments start with ``#``; blank lines are skipped.
"""
from __future__ import annotations

import re

from ..errors import SpecError
from . import Cluster, Host

# A host never starts with '-': ssh and mpirun would take it as an option (-oProxyCommand=...).
_LINE_RE = re.compile(r"^(?P<host>[A-Za-z0-9_.:\[\]][A-Za-z0-9_.:\-\[\]]*)(?:\s+slots\s*=\s*(?P<slots>\S+))?\s*$")


def parse_hostfile(text: str, source: str) -> tuple[Host, ...]:
    """Parse hostfile text into hosts with slots (None when a line gives none).

    Raises:
        SpecError: a line is not ``host [slots=N]``, N is not a positive integer, or a host repeats.
    """
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE_RE.match(line)
        if not m:
            raise SpecError(f"{source}:{lineno}: cannot parse {line!r}; expected 'HOST' or 'HOST slots=N'")
        slots = m.group("slots")
        if slots is not None and not (slots.isdigit() and int(slots) > 0):
            raise SpecError(f"{source}:{lineno}: slots={slots!r} for host {m.group('host')!r}; "
                            "expected a positive integer")
        name = m.group("host")
        if name in seen:
            raise SpecError(f"{source}:{lineno}: host {name!r} already listed on line {seen[name]}; list each host once")
        seen[name] = lineno
        hosts.append(Host(name, int(slots) if slots else None))
    if not hosts:
        raise SpecError(f"{source}: no hosts listed; expected lines like 'algo-1 slots=8'")
    return tuple(hosts)


def parse_hosts_arg(text: str, source: str = "--hosts") -> tuple[Host, ...]:
    """Parse ``h1:2,h2:2`` (slots optional) into hosts.

    Raises:
        SpecError: an entry is empty, its slots are not a positive integer, or a host repeats.
    """
    lines = []
    for item in text.split(","):
        item = item.strip()
        name, sep, slots = item.rpartition(":") if ":" in item else (item, "", "")
        if not name:
            raise SpecError(f"{source}: entry {item!r} in {text!r} has no host name; expected 'HOST[:SLOTS],...'")
        lines.append(f"{name} slots={slots}" if sep else name)
    return parse_hostfile("\n".join(lines), source)


def hostfile_cluster(hosts: tuple[Host, ...], current_host: str, source: str,
                     network_interface: str | None = None) -> Cluster:
    """A Cluster from a host list; a current host not in the list is an error.

    Raises:
        SpecError: ``current_host`` is not among ``hosts``.
    """
    names = [h.name for h in hosts]
    if current_host not in names:
        raise SpecError(f"{source}: this host {current_host!r} is not among the hosts {names}; "
                        "pass --current-host NAME or list this host")
    return Cluster(hosts=hosts, current_host=current_host, source=source, network_interface=network_interface)
