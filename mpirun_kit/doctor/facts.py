"""Facts about one host, as plain frozen values that travel as JSON.

Place in the data flow::

    gather.gather_host()  ->  HostFacts  --JSON over ssh-->  checks.check_*()  ->  Check rows  ->  report

The gatherer is the only part that touches the machine; the checks judge these
values and nothing else, so every check is tested on recorded facts.  A fact that
could not be read is recorded as such (``None`` or an ``error`` text), never
guessed, so the checks can say "absent" rather than "ok".
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from ..errors import SpecError
from ..spec.launch_spec import parse_json_object


@dataclass(frozen=True)
class GpuFact:
    """One GPU as NVML reports it."""

    index: int
    name: str
    pci_bus_id: str
    #: NUMA node of its PCI root (the node pinning binds its rank to); None: no NUMA info.
    numa_node: int | None
    memory_total_mib: int
    #: volatile uncorrected ECC errors since the driver loaded; None: ECC off or not reported.
    ecc_uncorrected: int | None = None
    nvlink_active: int = 0
    nvlink_inactive: int = 0


@dataclass(frozen=True)
class LibFact:
    """A communication library found where the dynamic loader (or torch) would find it."""

    #: "nccl", "aws-ofi-nccl" or "libfabric".
    name: str
    path: str
    version: str | None = None


@dataclass(frozen=True)
class FileMode:
    """Permission bits of one ssh file; ``mode`` None: the file does not exist."""

    path: str
    mode: int | None
    #: "dir", "private-key", "public-key", "authorized_keys", "known_hosts", "config"
    kind: str


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket on the ssh port."""

    address: str
    port: int


@dataclass(frozen=True)
class Resolution:
    """How this host resolves one peer's name: its addresses, or why not."""

    peer: str
    addresses: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class MountFact:
    """Free space on a data or checkpoint path; ``error`` when it cannot be read."""

    path: str
    free_bytes: int | None = None
    total_bytes: int | None = None
    error: str | None = None
    #: True when the operator named it (missing = failure); False for the defaults.
    required: bool = False


@dataclass(frozen=True)
class HostFacts:
    """Everything the doctor knows about one host."""

    host: str
    #: the host's time.time() while gathering, for the clock-skew check.
    time: float
    #: "ok", or "absent: <why>" when NVML could not be loaded (no driver, no library).
    nvml: str
    gpus: tuple[GpuFact, ...] = ()
    efa_devices: tuple[str, ...] = ()
    #: `fi_info -p efa` exit status: True ok, False failed, None not installed.
    fi_info_efa: bool | None = None
    libs: tuple[LibFact, ...] = ()
    #: NCCL/EFA-related variables only (never the whole environment: it may hold credentials).
    env: tuple[tuple[str, str], ...] = ()
    ssh_port: int = 22
    ssh_files: tuple[FileMode, ...] = ()
    ssh_listeners: tuple[Listener, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    mounts: tuple[MountFact, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "host facts") -> "HostFacts":
        return cls.from_dict(parse_json_object(text, source, "the output of `mpirun_kit doctor --gather-only`"), source)

    @classmethod
    def from_dict(cls, raw: dict, source: str = "host facts") -> "HostFacts":
        nested = {"gpus": GpuFact, "libs": LibFact, "ssh_files": FileMode, "ssh_listeners": Listener,
                  "resolutions": Resolution, "mounts": MountFact}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        missing = sorted(k for k in ("host", "time", "nvml") if k not in raw)
        if unknown or missing:
            raise SpecError(f"{source}: unknown key(s) {unknown}, missing key(s) {missing}; "
                            "the hosts run different mpirun_kit versions? Use one image everywhere")
        vals = dict(raw)
        try:
            for key, typ in nested.items():
                if key in vals:
                    vals[key] = tuple(typ(**_tuples(item)) for item in vals[key])
            vals["efa_devices"] = tuple(vals.get("efa_devices", ()))
            vals["env"] = tuple((str(k), str(v)) for k, v in vals.get("env", ()))
            return cls(**vals)
        except TypeError as exc:
            raise SpecError(f"{source}: malformed facts ({exc}); use one mpirun_kit version on every host") from exc


def _tuples(item: dict) -> dict:
    """JSON lists back to the tuples the frozen values hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in item.items()}
