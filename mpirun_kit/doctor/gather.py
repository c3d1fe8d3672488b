"""The doctor's gatherer: reads one host into a ``HostFacts`` value; judges nothing.

Place in the data flow: this is a discovery module (like cluster/discover.py and
cluster/probe.py), one of the few that read the machine: NVML, sysfs, /proc/net,
the loader cache, ~/.ssh, name resolution and free space.  Its environment is an
argument (the CLI passes ``os.environ``).  The parsers of what it reads
(``parse_proc_net_tcp``, ``parse_ldconfig``, ``lib_version``) are pure and tested
on recorded text; checks.py judges the result.

GPUs and EFA reuse cluster/probe.py (``read_gpus``, ``detect_efa``) so the doctor sees
exactly what pinning sees; only the health fields (memory, ECC, NVLink) are read
here in addition.
"""
from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import socket
import stat
from pathlib import Path
from typing import Mapping, Sequence

from ..core.clock import SYSTEM_CLOCK, Clock
from .facts import FileMode, GpuFact, HostFacts, LibFact, Listener, MountFact, Resolution

log = logging.getLogger(__name__)

#: environment variables the doctor records: NCCL/libfabric/verbs knobs only.
ENV_PREFIXES = ("NCCL_", "FI_", "RDMAV_")
#: data and checkpoint paths checked when the operator names none (SageMaker's, and the usual FSx mount).
DEFAULT_MOUNTS = ("/opt/ml/input/data", "/opt/ml/checkpoints", "/fsx")
#: NVLink links NVML may report per GPU (NVML_NVLINK_MAX_LINKS is 18 on H100).
NVLINK_MAX_LINKS = 18

_LIB_PATTERNS = (
    ("nccl", re.compile(r"^libnccl\.so(\.[\d.]+)?$")),
    ("aws-ofi-nccl", re.compile(r"^libnccl-net(-ofi)?\.so(\.[\d.]+)?$")),
    ("libfabric", re.compile(r"^libfabric\.so(\.[\d.]+)?$")),
)


# --- pure parsers ---------------------------------------------------------------

def parse_proc_net_tcp(text: str, port: int, v6: bool = False) -> tuple[Listener, ...]:
    """Listening sockets on ``port`` from /proc/net/tcp (or tcp6) text."""
    out = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 4 or parts[3] != "0A":  # 0A = TCP_LISTEN
            continue
        addr_hex, _, port_hex = parts[1].partition(":")
        if int(port_hex, 16) != port:
            continue
        out.append(Listener(_hex_addr(addr_hex, v6), port))
    return tuple(out)


def _hex_addr(h: str, v6: bool) -> str:
    raw = bytes.fromhex(h)
    if not v6:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # /proc prints IPv6 as four host-order (little-endian) 32-bit words.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def parse_ldconfig(text: str) -> tuple[str, ...]:
    """Paths of every library in `ldconfig -p` output."""
    return tuple(line.rsplit("=>", 1)[1].strip() for line in text.splitlines() if "=>" in line)


def lib_version(path: str) -> str | None:
    """The version in a library's file name after following links (libnccl.so.2.21.5 -> 2.21.5)."""
    real = os.path.basename(os.path.realpath(path))
    m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", real)
    return m.group(1) if m else None


def classify_libs(paths: Sequence[str]) -> tuple[LibFact, ...]:
    """The NCCL, aws-ofi-nccl and libfabric libraries among ``paths`` (one per real file)."""
    seen: set[str] = set()
    out = []
    for p in paths:
        base = os.path.basename(p)
        for name, pattern in _LIB_PATTERNS:
            if pattern.match(base):
                real = os.path.realpath(p)
                if real not in seen:
                    seen.add(real)
                    out.append(LibFact(name, p, lib_version(p)))
    return tuple(out)


def relevant_env(environ: Mapping[str, str], stale_names: Sequence[str] = ()) -> tuple[tuple[str, str], ...]:
    """The NCCL/EFA part of an environment, sorted; credentials and the rest never leave the host."""
    return tuple(sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIXES) or k in stale_names))


# --- readers --------------------------------------------------------------------

def _gpu_facts(sys_root: Path, nvml) -> tuple[str, tuple[GpuFact, ...]]:
    from ..cluster.probe import read_gpus

    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return "absent: nvidia-ml-py is not installed", ()
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError) as exc:
        return f"absent: NVML could not be loaded ({exc})", ()
    try:
        # read_gpus pairs its own nvmlInit/nvmlShutdown; NVML counts references, so the
        # handles below stay valid until our own nvmlShutdown.
        base = read_gpus(sys_root, nvml)
        gpus = []
        for g in base:
            h = nvml.nvmlDeviceGetHandleByIndex(g.index)
            mem = nvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            try:
                ecc = int(nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                           nvml.NVML_VOLATILE_ECC))
            except nvml.NVMLError:  # ECC disabled or not supported on this board
                ecc = None
            active = inactive = 0
            for link in range(NVLINK_MAX_LINKS):
                try:
                    state = nvml.nvmlDeviceGetNvLinkState(h, link)
                except nvml.NVMLError:  # link does not exist on this GPU
                    continue
                if state == nvml.NVML_FEATURE_ENABLED:
                    active += 1
                else:
                    inactive += 1
            gpus.append(GpuFact(g.index, g.name, g.pci_bus_id, g.numa_node, int(mem), ecc, active, inactive))
        return "ok", tuple(gpus)
    finally:
        nvml.nvmlShutdown()


def _library_paths(environ: Mapping[str, str], library_cache: str) -> list[str]:
    """Where the loader and torch find libraries: ldconfig's cache (``Machine.library_cache``'s text),
    LD_LIBRARY_PATH, pip NVIDIA wheels."""
    paths: list[str] = list(parse_ldconfig(library_cache))
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += ["/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "/opt/amazon/ofi-nccl/lib", "/opt/amazon/efa/lib"]
    # torch from pip loads NCCL from the nvidia-nccl wheel by rpath, not through ldconfig.
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        if spec and spec.submodule_search_locations:
            dirs += [os.path.join(loc, "nccl", "lib") for loc in spec.submodule_search_locations]
    except (ImportError, ValueError):
        pass
    for d in dirs:
        paths += sorted(glob.glob(os.path.join(d, "lib*.so*")))
    return paths


def _ofi_nccl_version(libs: tuple[LibFact, ...], efa_manifest: Path) -> tuple[LibFact, ...]:
    """aws-ofi-nccl's file name carries no version; the EFA installer's manifest does."""
    try:
        text = efa_manifest.read_text()
    except OSError:
        return libs
    m = re.search(r"(?:aws-ofi-nccl|libnccl-ofi|ofi-nccl)\S*\s+v?(\d+\.\d+\.\d+)", text)
    if not m:
        return libs
    return tuple(LibFact(l.name, l.path, l.version or m.group(1)) if l.name == "aws-ofi-nccl" else l for l in libs)


def _mode(path: Path, kind: str) -> FileMode:
    try:
        return FileMode(str(path), stat.S_IMODE(path.stat().st_mode), kind)
    except OSError:
        return FileMode(str(path), None, kind)


def _ssh_files(ssh_dir: Path) -> tuple[FileMode, ...]:
    files = [_mode(ssh_dir, "dir")]
    names = sorted(p.name for p in ssh_dir.iterdir()) if ssh_dir.is_dir() else []
    for name in names:
        if name.startswith("id_"):
            files.append(_mode(ssh_dir / name, "public-key" if name.endswith(".pub") else "private-key"))
    for name, kind in (("authorized_keys", "authorized_keys"), ("known_hosts", "known_hosts"), ("config", "config")):
        if name in names or kind == "authorized_keys":
            files.append(_mode(ssh_dir / name, kind))
    return tuple(files)


def _listeners(port: int, proc_root: Path) -> tuple[Listener, ...]:
    out: list[Listener] = []
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            out += parse_proc_net_tcp((proc_root / "net" / name).read_text(), port, v6)
        except OSError:
            pass
    return tuple(out)


def _resolve(peer: str) -> Resolution:
    try:
        infos = socket.getaddrinfo(peer, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return Resolution(peer, (), exc.strerror or str(exc))
    return Resolution(peer, tuple(sorted({i[4][0] for i in infos})))


def _mount(path: str, required: bool) -> MountFact:
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        return MountFact(path, error=exc.strerror or str(exc), required=required)
    return MountFact(path, usage.free, usage.total, required=required)


def gather_host(host: str, *, peers: Sequence[str] = (), mounts: Sequence[str] = (),
                environ: Mapping[str, str], ssh_dir: Path | str = "/root/.ssh", ssh_port: int = 22,
                clock: Clock = SYSTEM_CLOCK, sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"),
                efa_manifest: Path = Path("/opt/amazon/efa_installed_packages"), nvml=None) -> HostFacts:
    """Read this host into a HostFacts value.

    Args:
        host: the name this host has in the job (algo-i), reported back as is.
        peers: every host of the job; each is resolved from here.
        mounts: data/checkpoint paths the operator named (missing ones fail);
            when empty, DEFAULT_MOUNTS are reported where they exist.
        environ: this host's environment (only NCCL/EFA variables are kept).
        ssh_dir: the login user's ~/.ssh.
        nvml: the pynvml module (injected in tests); imported when None.
    """
    from ..spec.presets import STALE_ENV
    from ..cluster.local import Machine
    from ..exec.command import command_runner

    # This machine's commands (fi_info, ldconfig) are read through the one reader, cluster/local.Machine.
    machine = Machine(command_runner(timeout_s=10.0, clock=clock), sys_root=sys_root)
    nvml_state, gpus = _gpu_facts(sys_root, nvml)
    efa = machine.efa()
    libs = _ofi_nccl_version(classify_libs(_library_paths(environ, machine.library_cache())), efa_manifest)
    if mounts:
        mount_facts = tuple(_mount(m, True) for m in mounts)
    else:
        mount_facts = tuple(_mount(m, False) for m in DEFAULT_MOUNTS if os.path.exists(m))
    return HostFacts(
        host=host,
        time=clock.time(),
        nvml=nvml_state,
        gpus=gpus,
        efa_devices=efa.devices,
        fi_info_efa=efa.fi_info_ok,
        libs=libs,
        env=relevant_env(environ, tuple(STALE_ENV)),
        ssh_port=ssh_port,
        ssh_files=_ssh_files(Path(ssh_dir)),
        ssh_listeners=_listeners(ssh_port, proc_root),
        resolutions=tuple(_resolve(p) for p in peers),
        mounts=mount_facts,
    )
