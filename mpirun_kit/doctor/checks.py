"""The doctor's judgement: pure functions from gathered facts to ``Check`` rows.

Place in the data flow: ``HostFacts`` (facts.py, read by gather.py on each host)
-> ``check_host`` per host, ``check_cluster`` across hosts, ``check_allreduce`` for
the smoke test -> rows -> report.py (table / JSON) -> exit code (cli/doctor.py).

Nothing here reads the machine, the clock or the environment; the tests feed
recorded facts.  Status meanings:

* ``ok``     checked and fine
* ``warn``   works, but worth fixing (never changes the exit code)
* ``fail``   will break or slow the job; the doctor exits non-zero
* ``absent`` the hardware or library is not on this host (no GPU, no EFA): fine
  on a CPU machine, reported so nobody mistakes it for "checked"
* ``skip``   not applicable (e.g. ssh checks on a single-host run)

Stale NCCL/EFA variables come from the one table in spec/presets.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..spec.presets import find_stale
from .facts import HostFacts

OK, WARN, FAIL, ABSENT, SKIP = "ok", "warn", "fail", "absent", "skip"
#: host column of rows that are about the cluster as a whole.
CLUSTER = "cluster"
GIB = 1024 ** 3


@dataclass(frozen=True)
class Check:
    """One row of the doctor's report."""

    name: str
    host: str
    status: str
    detail: str
    #: how to fix it; empty when there is nothing to fix.
    fix: str = ""


@dataclass(frozen=True)
class Expectations:
    """What the operator asked for; every threshold is here, none is buried in a check."""

    #: every host of the job (ssh/sshd/resolution matter only when there are several).
    hosts: tuple[str, ...] = ()
    min_free_bytes: int = 10 * GIB
    max_skew_s: float = 1.0
    #: stale variables the operator set on purpose (reported as warn instead of fail).
    allow_stale: tuple[str, ...] = ()

    @property
    def multi_host(self) -> bool:
        return len(self.hosts) > 1


@dataclass(frozen=True)
class AllreduceResult:
    """Outcome of the cross-host allreduce smoke test (rank 0's report, or why it failed)."""

    world_size: int
    backend: str
    bytes: int = 0
    seconds: float = 0.0
    algbw_gbps: float = 0.0
    busbw_gbps: float = 0.0
    error: str | None = None
    #: host -> last lines of its output, kept when a rank failed.
    logs: tuple[tuple[str, str], ...] = field(default=(), repr=False)


# --- per host ---------------------------------------------------------------------

def check_gpus(f: HostFacts) -> list[Check]:
    if f.nvml != "ok":
        return [Check("gpus", f.host, ABSENT, f"no GPUs ({f.nvml.removeprefix('absent: ')})")]
    if not f.gpus:
        return [Check("gpus", f.host, WARN, "NVML loaded but reports no GPUs",
                      "check `nvidia-smi`; the container may lack --gpus / the NVIDIA runtime")]
    models = sorted({g.name for g in f.gpus})
    mem = min(g.memory_total_mib for g in f.gpus)
    rows = [Check("gpus", f.host, OK if len(models) == 1 else WARN,
                  f"{len(f.gpus)} x {', '.join(models)}, {mem} MiB each",
                  "" if len(models) == 1 else "mixed GPU models on one host; ranks will run at the slowest one's pace")]
    bad_ecc = [g for g in f.gpus if g.ecc_uncorrected]
    rows.append(Check("gpu-ecc", f.host, FAIL if bad_ecc else OK,
                      "; ".join(f"GPU {g.index} ({g.pci_bus_id}): {g.ecc_uncorrected} uncorrected ECC errors"
                                for g in bad_ecc) or "no uncorrected ECC errors",
                      "drain this host: reset the GPU (nvidia-smi -r -i N) or replace the instance" if bad_ecc else ""))
    if any(g.nvlink_active for g in f.gpus):
        down = [g for g in f.gpus if g.nvlink_inactive]
        rows.append(Check("nvlink", f.host, FAIL if down else OK,
                          "; ".join(f"GPU {g.index}: {g.nvlink_inactive} of {g.nvlink_active + g.nvlink_inactive} "
                                    "links down" for g in down)
                          or f"{sum(g.nvlink_active for g in f.gpus)} links up",
                          "NVLink down forces traffic over PCIe; replace the instance" if down else ""))
    else:
        rows.append(Check("nvlink", f.host, ABSENT, "no NVLink links reported (PCIe-only instance)"))
    by_node: dict[str, list[int]] = {}
    for g in f.gpus:
        by_node.setdefault("?" if g.numa_node is None else str(g.numa_node), []).append(g.index)
    topo = ", ".join(f"node {n}: GPU {','.join(map(str, idx))}" for n, idx in sorted(by_node.items()))
    unknown = "?" in by_node
    rows.append(Check("gpu-numa", f.host, WARN if unknown else OK, topo,
                      "the kernel reports no NUMA node for some GPUs; pinning cannot bind their ranks' CPUs"
                      if unknown else ""))
    return rows


def _libs(f: HostFacts, name: str) -> list:
    return [l for l in f.libs if l.name == name]


def check_efa(f: HostFacts) -> list[Check]:
    if not f.efa_devices:
        return [Check("efa", f.host, ABSENT, "no EFA devices in /sys/class/infiniband"
                      + ("" if f.fi_info_efa is None else f"; fi_info -p efa {'ok' if f.fi_info_efa else 'failed'}"))]
    devs = ", ".join(f.efa_devices)
    if f.fi_info_efa is None:
        return [Check("efa", f.host, FAIL, f"EFA devices {devs} but fi_info is not installed",
                      "install the EFA installer's libfabric (docker/install-efa.sh does)")]
    if not f.fi_info_efa:
        return [Check("efa", f.host, FAIL, f"EFA devices {devs} but `fi_info -p efa` fails",
                      "libfabric cannot open the devices: use the EFA installer's libfabric, run the "
                      "container with the EFA devices, and let the security group allow all traffic to itself")]
    return [Check("efa", f.host, OK, f"{len(f.efa_devices)} EFA devices ({devs}); fi_info -p efa ok")]


def check_libraries(f: HostFacts) -> list[Check]:
    rows = []
    has_gpu = bool(f.gpus)
    has_efa = bool(f.efa_devices)
    for name, needed, why in (
        ("nccl", has_gpu, "install the NCCL that matches torch (the pytorch base image ships it)"),
        ("aws-ofi-nccl", has_efa, "without the plugin NCCL silently falls back to TCP sockets over EFA hosts; "
                                  "install the EFA installer's aws-ofi-nccl (docker/install-efa.sh)"),
        ("libfabric", has_efa, "install the EFA installer's libfabric (docker/install-efa.sh)"),
    ):
        found = _libs(f, name)
        if not found:
            rows.append(Check(name, f.host, FAIL if needed else ABSENT, f"no {name} library found",
                              why if needed else ""))
            continue
        versions = sorted({l.version or "unknown version" for l in found})
        detail = "; ".join(f"{l.version or 'unknown version'} at {l.path}" for l in found)
        many = len([v for v in versions if v != "unknown version"]) > 1
        rows.append(Check(name, f.host, WARN if many else OK, detail,
                          f"several {name} versions on the loader path; the first one found wins" if many else ""))
    return rows


def check_env(f: HostFacts, allow: Sequence[str] = ()) -> list[Check]:
    findings = find_stale(dict(f.env))
    if not findings:
        return [Check("stale-env", f.host, OK, "no stale NCCL/EFA variables")]
    rows = []
    for s in findings:
        allowed = s.name in allow
        rows.append(Check("stale-env", f.host, WARN if allowed else FAIL,
                          f"{s.name}={s.value} is stale ({s.severity}): {s.reason}",
                          "" if allowed else f"unset {s.name} (or pass --allow-stale {s.name} if it is on purpose)"))
    return rows


#: modes sshd (StrictModes) and ssh accept, by file kind.
_GOOD_MODES = {
    "dir": (0o700,),
    "private-key": (0o600, 0o400),
    "authorized_keys": (0o600, 0o644),
}


def check_ssh(f: HostFacts, expect: Expectations) -> list[Check]:
    rows = []
    problems, missing = [], []
    for m in f.ssh_files:
        if m.mode is None:
            if m.kind in ("dir", "authorized_keys"):
                missing.append(m.path)
            continue
        good = _GOOD_MODES.get(m.kind)
        if good and m.mode not in good:
            want = " or ".join(f"{g:o}" for g in good)
            problems.append(f"{m.path} is {m.mode:o}, expected {want}")
        elif m.kind in ("config", "known_hosts") and m.mode & 0o022:
            # ssh refuses a config others can write ("Bad owner or permissions").
            problems.append(f"{m.path} is {m.mode:o}, expected no group/other write (644 or 600)")
    if problems:
        # Only multi-host jobs use ssh: on a single-host run loose modes are worth fixing, not a failure.
        rows.append(Check("ssh-keys", f.host, FAIL if expect.multi_host else WARN,
                          "; ".join(problems) + ("" if expect.multi_host else " (only multi-host jobs use ssh)"),
                          "chmod 700 ~/.ssh; chmod 600 ~/.ssh/id_* (not .pub) ~/.ssh/authorized_keys; "
                          "chmod go-w ~/.ssh/config ~/.ssh/known_hosts (ssh ignores a readable private key, "
                          "sshd rejects loose ~/.ssh)"))
    elif missing and expect.multi_host:
        rows.append(Check("ssh-keys", f.host, FAIL, f"missing {', '.join(missing)}",
                          "install the job's keys: mpirun_kit keys install --secret-file FILE --hosts ..."))
    elif missing:
        rows.append(Check("ssh-keys", f.host, SKIP, f"no {', '.join(missing)} (single-host run needs no ssh)"))
    else:
        shown = ", ".join(f"{m.path.rsplit('/', 1)[-1]} {m.mode:o}" for m in f.ssh_files
                          if m.mode is not None and m.kind in ("dir", "private-key", "authorized_keys"))
        rows.append(Check("ssh-keys", f.host, OK, shown))

    port = f.ssh_port
    wild = [l for l in f.ssh_listeners if l.address in ("0.0.0.0", "::")]
    addrs = ", ".join(f"{l.address}:{l.port}" for l in f.ssh_listeners)
    if not f.ssh_listeners:
        rows.append(Check("sshd", f.host, FAIL if expect.multi_host else SKIP,
                          f"nothing listens on port {port}" + ("" if expect.multi_host else " (single-host run)"),
                          f"start sshd on the cluster interface: {' '.join(_sshd_hint(port))}"
                          if expect.multi_host else ""))
    elif wild:
        rows.append(Check("sshd", f.host, WARN, f"sshd listens on every interface ({addrs})",
                          "listen on the cluster interface only: sshd -o ListenAddress=<cluster address> "
                          "(docker/sshd_config does)"))
    else:
        rows.append(Check("sshd", f.host, OK, f"listening on {addrs}"))
    return rows


def _sshd_hint(port: int) -> list[str]:
    return ["/usr/sbin/sshd", "-D", "-e", "-p", str(port), "-o", "ListenAddress=<cluster address>"]


def check_resolution(f: HostFacts) -> list[Check]:
    if not f.resolutions:
        return [Check("resolve", f.host, SKIP, "no peers to resolve (single-host run)")]
    rows = []
    for r in f.resolutions:
        if r.error or not r.addresses:
            rows.append(Check("resolve", f.host, FAIL, f"cannot resolve peer {r.peer} ({r.error or 'no address'})",
                              f"add {r.peer} to /etc/hosts or DNS on {f.host}; mpirun and NCCL reach "
                              "peers by name"))
        elif r.peer != f.host and all(a.startswith("127.") or a == "::1" for a in r.addresses):
            rows.append(Check("resolve", f.host, FAIL,
                              f"peer {r.peer} resolves to loopback ({', '.join(r.addresses)})",
                              f"fix /etc/hosts on {f.host}: {r.peer} must map to its cluster address"))
    if not rows:
        rows.append(Check("resolve", f.host, OK, f"all {len(f.resolutions)} peers resolve: " + ", ".join(
            f"{r.peer}={r.addresses[0]}" for r in f.resolutions)))
    return rows


def check_mounts(f: HostFacts, expect: Expectations) -> list[Check]:
    if not f.mounts:
        return [Check("disk", f.host, SKIP, "no data/checkpoint paths found (name them with --mount PATH)")]
    rows = []
    for m in f.mounts:
        if m.error is not None or m.free_bytes is None:
            rows.append(Check("disk", f.host, FAIL if m.required else WARN, f"{m.path}: {m.error}",
                              f"mount {m.path} (FSx/EFS) or fix the path"))
        elif m.free_bytes < expect.min_free_bytes:
            rows.append(Check("disk", f.host, FAIL,
                              f"{m.path}: {m.free_bytes / GIB:.1f} GiB free, expected at least "
                              f"{expect.min_free_bytes / GIB:.1f} GiB",
                              f"free space on {m.path} or lower --min-free-gb"))
        else:
            rows.append(Check("disk", f.host, OK, f"{m.path}: {m.free_bytes / GIB:.1f} GiB free of "
                                                  f"{(m.total_bytes or 0) / GIB:.1f} GiB"))
    return rows


def check_host(f: HostFacts, expect: Expectations) -> list[Check]:
    """Every single-host check of one host's facts, in report order."""
    return (check_gpus(f) + check_efa(f) + check_libraries(f) + check_env(f, expect.allow_stale)
            + check_ssh(f, expect) + check_resolution(f) + check_mounts(f, expect))


# --- across hosts -----------------------------------------------------------------

def skew_lower_bound(remote_time: float, sent: float, received: float) -> float:
    """The smallest clock offset consistent with one exchange.

    The coordinator read its clock at ``sent`` and ``received`` around the remote
    host reading ``remote_time``; a remote time inside that window is consistent
    with zero skew, so only the distance outside the window is certain skew.
    """
    return max(0.0, sent - remote_time, remote_time - received)


def check_cluster(facts: Mapping[str, HostFacts], unreachable: Mapping[str, str],
                  windows: Mapping[str, tuple[float, float]], expect: Expectations) -> list[Check]:
    """Checks across hosts: reachability, clock skew, the same GPUs everywhere.

    Args:
        facts: host -> its facts, for hosts that answered.
        unreachable: host -> why its facts could not be gathered.
        windows: host -> (coordinator time before asking, after the answer).
    """
    rows = []
    for host in expect.hosts or sorted(set(facts) | set(unreachable)):
        if host in unreachable:
            rows.append(Check("reach", host, FAIL, f"could not gather facts: {unreachable[host]}",
                              f"check that {host} is up and its sshd accepts the job's key "
                              f"(ssh {host} true)"))
            continue
        f = facts.get(host)
        if f is None:
            continue
        if host in windows:
            sent, received = windows[host]
            skew = skew_lower_bound(f.time, sent, received)
            if skew > expect.max_skew_s:
                rows.append(Check("clock-skew", host, FAIL,
                                  f"clock differs from the coordinator's by at least {skew:.2f} s "
                                  f"(limit {expect.max_skew_s:g} s)",
                                  "run chrony/NTP on every host (Amazon Time Sync: 169.254.169.123)"))
            else:
                rows.append(Check("clock-skew", host, OK,
                                  f"within {max(skew, (received - sent) / 2):.2f} s of the coordinator"))
    counts = {h: (len(f.gpus), tuple(sorted({g.name for g in f.gpus}))) for h, f in facts.items()}
    if len(set(counts.values())) > 1:
        detail = "; ".join(f"{h}: {n} x {', '.join(m) or 'none'}" for h, (n, m) in sorted(counts.items()))
        rows.append(Check("gpu-uniform", CLUSTER, FAIL, f"hosts differ in GPUs: {detail}",
                          "use one instance type for every host; replace hosts with missing GPUs"))
    elif len(facts) > 1:
        n, models = next(iter(counts.values()))
        rows.append(Check("gpu-uniform", CLUSTER, OK,
                          f"every host has {n} x {', '.join(models) or 'no GPU'}"))
    return rows


def check_allreduce(result: AllreduceResult | None) -> Check:
    if result is None:
        return Check("allreduce", CLUSTER, SKIP, "not run (one rank in all; use --ranks-per-host 2 or more hosts)")
    if result.error:
        return Check("allreduce", CLUSTER, FAIL, f"{result.backend} allreduce over {result.world_size} ranks "
                                                 f"failed: {result.error}",
                     "check the rows above (resolve, sshd, firewall / security group allows all traffic to itself)")
    return Check("allreduce", CLUSTER, OK,
                 f"{result.backend}, {result.world_size} ranks, {result.bytes / 2**20:.0f} MiB: "
                 f"busbw {result.busbw_gbps:.3f} GB/s (algbw {result.algbw_gbps:.3f} GB/s, "
                 f"{result.seconds * 1e3:.1f} ms per allreduce)")
