"""Pure description of a simulated cluster: names, addresses, paths and file contents.

Nothing here touches the system; ``cluster.py`` turns a ``SimLayout`` into
namespaces and processes.  Keeping the layout a value makes the rendered files
(sshd_config, /etc/hosts, resourceconfig.json) testable as whole values.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError

#: Every namespace this module creates starts with this prefix; `down_all` sweeps it.
NETNS_PREFIX = "mrk-"
_NAME_RE = re.compile(r"^[a-z0-9]{1,12}$")
#: Hosts sit on one /24; each cluster has its own switch namespace, so clusters
#: never see each other's addresses and may all use the same subnet.
DEFAULT_SUBNET = "10.233.0"
#: The interface name inside each host, as SageMaker names it.
HOST_IFNAME = "eth0"
#: in an entrypoint argv: the host's /opt/ml as this machine sees it (SimCluster.start_entrypoints replaces it).
HOST_OPT_ML = "${host_opt_ml}"
MAX_HOSTS = 200


@dataclass(frozen=True)
class SimHost:
    name: str          # algo-i, also its hostname
    index: int         # 1-based
    address: str       # IPv4 address on the cluster segment
    netns: str         # network namespace name
    switch_port: str   # veth name on the switch side
    dir: Path          # per-host state: keys, configs, logs, opt_ml

    @property
    def opt_ml(self) -> Path:
        return self.dir / "opt_ml"

    @property
    def ssh_dir(self) -> Path:
        return self.dir / "ssh"

    @property
    def sshd_config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"


@dataclass(frozen=True)
class SimLayout:
    name: str
    root: Path
    hosts: tuple[SimHost, ...]
    switch_netns: str
    subnet: str
    instance_type: str

    @property
    def hosts_file(self) -> Path:
        return self.root / "hosts"

    @property
    def cluster_key(self) -> Path:
        return self.root / "cluster_ed25519"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def host(self, name: str) -> SimHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise SpecError(f"sim cluster {self.name!r} has no host {name!r}; hosts are "
                        f"{[h.name for h in self.hosts]}")


def plan_layout(name: str, n_hosts: int, root: Path | str, subnet: str = DEFAULT_SUBNET,
                instance_type: str = "ml.c5.xlarge") -> SimLayout:
    """Compute the layout of cluster ``name`` with ``n_hosts`` hosts under ``root``.

    Raises:
        SpecError: the name is not 1-12 lowercase letters/digits, or n_hosts is out of range.
    """
    if not _NAME_RE.match(name or ""):
        raise SpecError(f"sim cluster name {name!r} is invalid: use 1-12 lowercase letters or digits "
                        "(it becomes part of network namespace names)")
    if not isinstance(n_hosts, int) or not 1 <= n_hosts <= MAX_HOSTS:
        raise SpecError(f"sim cluster host count {n_hosts!r} is invalid: expected 1..{MAX_HOSTS}")
    root = Path(root).resolve()
    hosts = tuple(
        SimHost(name=f"algo-{i}", index=i, address=f"{subnet}.{i}", netns=f"{NETNS_PREFIX}{name}-{i}",
                switch_port=f"h{i}", dir=root / f"algo-{i}")
        for i in range(1, n_hosts + 1)
    )
    return SimLayout(name=name, root=root, hosts=hosts, switch_netns=f"{NETNS_PREFIX}{name}-sw",
                     subnet=subnet, instance_type=instance_type)


def render_hosts_file(layout: SimLayout) -> str:
    """Every host's name, also for its IPv4-mapped IPv6 address: a dual-stack server (torch's c10d store, gloo)
    sees its IPv4 clients as ``::ffff:A.B.C.D``; without these lines their reverse lookup fell through to DNS,
    which a simulated host cannot reach, and every rank warned "The hostname of the client socket cannot be
    retrieved. err=-3" (EAI_AGAIN; issue #28)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{h.address}\t{h.name}" for h in layout.hosts]
    lines += ["::ffff:127.0.0.1\tlocalhost"] + [f"::ffff:{h.address}\t{h.name}" for h in layout.hosts]
    return "\n".join(lines) + "\n"


def render_sshd_config(host: SimHost) -> str:
    """sshd for one host: key-only root login, listening on the cluster address only."""
    return "\n".join([
        "Port 22",
        f"ListenAddress {host.address}",
        f"HostKey {host.host_key}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "AuthorizedKeysFile /root/.ssh/authorized_keys",
        "StrictModes yes",
        "PidFile /run/sshd.pid",
        # mpirun opens one session per host at once; many hosts start together.
        "MaxStartups 200",
        "MaxSessions 200",
        "PrintMotd no",
        "LogLevel ERROR",
        "",
    ])


def render_ssh_client_config() -> str:
    """The client side every host uses: the cluster key, known host keys, never a prompt."""
    return "\n".join([
        "Host *",
        "  IdentityFile /root/.ssh/id_ed25519",
        "  UserKnownHostsFile /root/.ssh/known_hosts",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ConnectTimeout 5",
        "  LogLevel ERROR",
        "",
    ])


def render_known_hosts(layout: SimLayout, host_public_keys: dict[str, str]) -> str:
    """known_hosts naming every host by name and address, so StrictHostKeyChecking stays on."""
    return "".join(f"{h.name},{h.address} {host_public_keys[h.name].strip()}\n" for h in layout.hosts)


def render_resource_config(layout: SimLayout, host: SimHost) -> str:
    """A SageMaker-format /opt/ml/input/config/resourceconfig.json for ``host``."""
    names = [h.name for h in layout.hosts]
    return json.dumps({
        "current_host": host.name,
        "current_instance_type": layout.instance_type,
        "current_group_name": "homogeneousCluster",
        "hosts": names,
        "instance_groups": [{"instance_group_name": "homogeneousCluster",
                             "instance_type": layout.instance_type, "hosts": names}],
        "network_interface_name": HOST_IFNAME,
    }, indent=2) + "\n"
