"""Bring a ``SimLayout`` to life and tear it down; run programs on its hosts.

``up()`` creates, for every host, a network namespace wired to the cluster's
switch namespace and starts ``hostinit`` as PID 1 of fresh PID/UTS/mount
namespaces, all hosts at once, then waits (bounded) for every sshd.
``popen(host, argv)`` runs a program inside a host through ``nsenter``.
``down()`` kills every process in the cluster's namespaces by pid and deletes
the namespaces; it is safe to call at any time, any number of times, and
``down_all()`` sweeps clusters whose controller died.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence


from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError, SpecError
from ..core.files import write_atomic
from ..exec.command import run as run_command, spawn
from ..exec.supervisor import start_process
from .layout import (HOST_IFNAME, HOST_OPT_ML, NETNS_PREFIX, SimHost, SimLayout, plan_layout, render_hosts_file,
                     render_known_hosts, render_resource_config, render_ssh_client_config,
                     render_sshd_config)

log = logging.getLogger(__name__)


class SimError(ClusterError):
    """The simulated cluster could not be brought up, used or torn down."""


class SimClusterExistsError(SimError):
    """``up`` refused: a cluster of that name is already up (it is left alone)."""


class SimStopped(SimError):
    """``up`` gave up because its caller asked it to stop (``cancelled``: a Ctrl-C during the bring-up)."""


#: one file per cluster brought up for a job: its owner's pid and start time (tmpfs: gone with the namespaces
#: at a reboot).
OWNERS_DIR = Path("/run/mpirun-kit-sim/owners")


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` (field 22 of /proc/PID/stat, clock ticks since boot), None when it is gone:
    a pid and its start time name one process, never a later one that reused the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_file(name: str) -> Path:
    return OWNERS_DIR / f"{name}.json"


def _pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[INODE]``): a pid means the same process only inside it."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def record_owner(name: str, n_hosts: int, root: Path, owner: int) -> None:
    """Record ``owner`` (a live pid of this PID namespace) as the process that tears cluster ``name`` down."""
    OWNERS_DIR.mkdir(parents=True, exist_ok=True)
    write_atomic(_owner_file(name), json.dumps({"name": name, "hosts": n_hosts, "root": str(root), "pid": owner,
                                                "start": _process_start(owner), "pidns": _pid_namespace()}))


def sweep_orphans(report=None, clock: Clock = SYSTEM_CLOCK) -> list[str]:
    """Tear down every recorded cluster whose owner died without doing it (SIGKILL); return their names.

    ``report`` hears one line per cluster swept (the CLI prints it).  Its namespaces, processes and keys go;
    its logs stay under its root.  Clusters whose owner runs, and clusters without an owner, are left alone.
    """
    try:
        files = sorted(OWNERS_DIR.glob("*.json"))
    except OSError:
        return []
    swept = []
    for f in files:
        try:
            rec = json.loads(f.read_text())
            name, pid = str(rec["name"]), int(rec["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            f.unlink(missing_ok=True)   # unreadable: written by no owner of ours that still runs
            continue
        if rec.get("pidns") != _pid_namespace():
            continue   # recorded from another PID namespace: its pid cannot be judged from here
        if rec.get("start") is not None and _process_start(pid) == rec["start"]:
            continue   # its owner runs: its cluster is in use
        try:
            layout = plan_layout(name, int(rec.get("hosts", 1)), rec.get("root", "/"))
        except SpecError:
            f.unlink(missing_ok=True)
            continue
        existed = down_named(name, clock)
        for path in secret_files(layout) + [layout.state_file]:
            path.unlink(missing_ok=True)
        f.unlink(missing_ok=True)
        swept.append(name)
        if report is not None and existed:
            report(f"swept sim cluster {name!r}: its submit (pid {pid}) died without tearing it down; its "
                   f"namespaces, processes and keys are gone, its logs are kept in {rec.get('root')}")
    return swept


def _run(argv: Sequence[str]) -> None:
    res = run_command(argv)
    if res.returncode != 0:
        raise SimError(f"`{' '.join(argv)}` failed (exit {res.returncode}): {res.stderr.strip()}")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    write_atomic(path, text, mode)


def _netns_names() -> list[str]:
    res = run_command(["ip", "netns", "list"])
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def _netns_pids(netns: str) -> list[int]:
    res = run_command(["ip", "netns", "pids", netns])
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def _kill_netns(names: Sequence[str], clock: Clock, timeout: float = 10.0) -> None:
    """SIGKILL every process in the given namespaces, wait for them, delete the namespaces."""
    import psutil  # here, not at the top: submit imports this module for sweep_orphans alone
    procs = []
    for ns in names:
        for pid in _netns_pids(ns):
            try:
                p = psutil.Process(pid)
                p.kill()
                procs.append(p)
            except psutil.NoSuchProcess:
                pass
    psutil.wait_procs(procs, timeout=timeout)
    for ns in names:
        run_command(["ip", "netns", "del", ns])


def list_clusters() -> list[str]:
    """Names of simulated clusters whose namespaces exist on this machine."""
    found = set()
    for ns in _netns_names():
        if ns.startswith(NETNS_PREFIX):
            found.add(ns[len(NETNS_PREFIX):].rsplit("-", 1)[0])
    return sorted(found)


def down_named(name: str, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Tear down cluster ``name`` from its namespace names alone (no state needed); True if any existed."""
    plan_layout(name, 1, "/")  # validates the name
    prefix = f"{NETNS_PREFIX}{name}-"
    found = [ns for ns in _netns_names() if ns.startswith(prefix)]
    _kill_netns(found, clock)
    return bool(found)


def down_all(clock: Clock = SYSTEM_CLOCK) -> list[str]:
    """Tear down every simulated cluster on this machine; return their names."""
    names = list_clusters()
    _kill_netns([ns for ns in _netns_names() if ns.startswith(NETNS_PREFIX)], clock)
    return names


def secret_files(layout: SimLayout) -> list[Path]:
    """The cluster's private keys (and their public halves): useless once it is down, never left behind."""
    keys = [layout.cluster_key]
    for h in layout.hosts:
        keys += [h.host_key, h.ssh_dir / "id_ed25519"]
    return [p for k in keys for p in (k, Path(f"{k}.pub"))] + [job_secret_file(h) for h in layout.hosts]


def host_path() -> str:
    """The PATH of programs started on a host: this Python's bin directory first, then the system's."""
    return f"{os.path.dirname(sys.executable)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def job_secret_file(host) -> Path:
    """Where ``host`` finds the job secret: its ``mpirun-keys`` input channel, as on SageMaker
    (entrypoint/common.default_secret_file)."""
    from ..exec.sshkeys import SECRET_FILE_NAME

    return host.opt_ml / "input" / "data" / "mpirun-keys" / SECRET_FILE_NAME


def purge_root(root: Path | str) -> list[Path]:
    """Delete what ``up`` wrote under ``root`` (only that), then ``root`` if it is left empty; return what went.

    Only the layout's own names are touched (hosts, state.json, the cluster key, algo-N/ directories), so a
    ``--root`` pointing at a directory of other files loses nothing else.
    """
    root = Path(root)
    gone = []
    for name in ("hosts", "state.json", "cluster_ed25519", "cluster_ed25519.pub"):
        if (root / name).is_file() and not (root / name).is_symlink():
            (root / name).unlink()
            gone.append(root / name)
    for d in sorted(root.glob("algo-[0-9]*")):
        if d.is_dir() and not d.is_symlink() and d.name[5:].isdigit():
            shutil.rmtree(d)
            gone.append(d)
    try:
        root.rmdir()
        gone.append(root)
    except OSError:
        pass  # missing, or holds files that are not ours
    return gone


@dataclass
class SimProcess:
    """A program running on one simulated host.

    ``popen`` is the ``nsenter`` process; the program is its child, the only
    process signals should reach (nsenter does not forward them).
    """

    host: str
    popen: subprocess.Popen
    log_path: Path | None = None
    clock: Clock = SYSTEM_CLOCK     # the cluster's: waits for the program to appear take it

    @property
    def pid(self) -> int:
        """Pid (in the machine's PID namespace) of the program itself."""
        import psutil  # here, not at the top: submit imports this module for sweep_orphans alone
        end = Deadline(self.clock, 5.0)
        while True:
            try:
                kids = psutil.Process(self.popen.pid).children()
            except psutil.NoSuchProcess:
                kids = []
            if kids:
                return kids[0].pid
            if self.popen.poll() is not None or end.expired():
                raise SimError(f"program on {self.host} is not running (nsenter exited "
                               f"{self.popen.returncode})")
            self.clock.sleep(0.01)

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""


class SimCluster:
    """N simulated hosts.  Use as a context manager: ``with SimCluster(3, root) as sim: ...``.

    Args:
        n_hosts: number of hosts, named algo-1..algo-N.
        root: directory for the cluster's keys, configs, per-host /opt/ml and logs.
        name: 1-12 lowercase letters/digits; part of every namespace name.
        instance_type: written to each host's resourceconfig.json.
        start_sshd: hosts whose sshd starts (default all); a host left out is up
            but never answers ssh, like a host that failed to boot its image.
        clock: injected time for every wait.
        up_timeout: seconds allowed for all hosts to come up.
        owner: the pid of the process that tears the cluster down (recorded: ``sweep_orphans``); it must be
            this process (its death then SIGKILLs the hosts, PR_SET_PDEATHSIG).  None: kept until ``down``.
        cancelled: asked while ``up`` waits for the hosts; True ends the wait (SimStopped).
    """

    def __init__(self, n_hosts: int, root: Path | str, name: str = "sim", *,
                 instance_type: str = "ml.c5.xlarge", start_sshd: Sequence[str] | None = None,
                 clock: Clock = SYSTEM_CLOCK, up_timeout: float = 60.0, owner: int | None = None,
                 cancelled: Callable[[], bool] | None = None):
        self.layout: SimLayout = plan_layout(name, n_hosts, root, instance_type=instance_type)
        self.start_sshd = set(start_sshd) if start_sshd is not None else {h.name for h in self.layout.hosts}
        self.clock = clock
        self.up_timeout = up_timeout
        self.owner = owner
        self.cancelled = cancelled
        self._inits: dict[str, subprocess.Popen] = {}
        self._init_pids: dict[str, int] = {}

    # -- values ---------------------------------------------------------------
    @property
    def hosts(self) -> tuple[SimHost, ...]:
        return self.layout.hosts

    @property
    def name(self) -> str:
        return self.layout.name

    def host(self, name: str) -> SimHost:
        return self.layout.host(name)

    # -- lifecycle ------------------------------------------------------------
    def __enter__(self) -> "SimCluster":
        try:
            return self.up()
        except SimClusterExistsError:
            raise  # someone else's cluster: not ours to tear down
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self, replace: bool = False) -> "SimCluster":
        """Create the cluster.

        Raises:
            SimError: a cluster of this name is already up (``replace``: tear it down and start afresh).
        """
        if os.geteuid() != 0:
            raise SimError("the simulated cluster needs root (network namespaces, mounts); run as root")
        for tool in ("ip", "unshare", "nsenter", "mount", "ssh-keygen"):
            if shutil.which(tool) is None:
                raise SimError(f"`{tool}` not found; install iproute2, util-linux and openssh-client "
                               "(bash ops/quickstart.sh setup does)")
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        if self.start_sshd and not os.path.exists(sshd):
            raise SimError("sshd not found at /usr/sbin/sshd; install openssh-server "
                           "(bash ops/quickstart.sh setup does)")
        if not replace and self.name in list_clusters():
            raise SimClusterExistsError(f"a sim cluster named {self.name!r} is already up; tear it down first "
                           f"(mpirun_kit sim down --name {self.name}), replace it (sim up --replace) "
                           "or choose another name")
        self.down()
        if self.owner is not None:   # before any namespace exists: a SIGKILL from now on is swept
            record_owner(self.name, len(self.hosts), self.layout.root, self.owner)
        self._write_files()
        self._make_network()
        for d in ("/opt/ml", "/root/.ssh"):
            # Mount points for the per-host bind mounts; an empty directory is all that remains.
            os.makedirs(d, exist_ok=True)
        for h in self.hosts:
            self._inits[h.name] = self._start_init(h, sshd)
        self._wait_ready()
        self._save_state()
        log.info("sim cluster %s up: %s", self.name, ", ".join(f"{h.name}={h.address}" for h in self.hosts))
        return self

    def down(self) -> None:
        """Kill every process on every host and delete the namespaces.  Idempotent."""
        # First every host's init with its whole process group (each started in a session of its own:
        # setpriv -> ip netns exec -> unshare, and the host's PID 1 unshare forks).  The namespace sweep below
        # alone misses a host that is starting: it lists the processes inside a namespace at one instant, and
        # a PID 1 that unshare forks just after, and that has not yet armed its --kill-child death signal when
        # unshare is killed (util-linux 2.38 arms it after the fork, unchecked), runs on outside any named
        # namespace (on 14f00b4, after a Ctrl-C during the bring-up).  A signal to a process group also
        # reaches a child being forked.  The PID 1's death ends every process of its host.
        from ..exec.supervisor import signal_group

        for p in self._inits.values():
            if p.returncode is None:   # not reaped: its pid, and so its group's id, is still its own
                signal_group(p.pid, signal.SIGKILL)
        names = [h.netns for h in self.hosts] + [self.layout.switch_netns]
        existing = set(_netns_names())
        _kill_netns([n for n in names if n in existing], self.clock)
        for p in self._inits.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        self._inits.clear()
        self._init_pids.clear()
        for path in secret_files(self.layout) + [self.layout.state_file]:
            path.unlink(missing_ok=True)
        if self.owner is not None:
            _owner_file(self.name).unlink(missing_ok=True)

    @classmethod
    def attach(cls, name: str, root: Path | str, clock: Clock = SYSTEM_CLOCK) -> "SimCluster":
        """The cluster ``name`` brought up earlier (e.g. by ``mpirun_kit sim up``) under ``root``."""
        state_file = Path(root) / "state.json"
        try:
            state = json.loads(state_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SimError(f"no running sim cluster {name!r} under {root} ({state_file}: {exc}); "
                           f"start one with `mpirun_kit sim up --name {name}`") from exc
        sim = cls(state["n_hosts"], root, name, instance_type=state["instance_type"], clock=clock)
        sim._init_pids = {k: int(v) for k, v in state["init_pids"].items()}
        return sim

    # -- running programs -----------------------------------------------------
    def popen(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              log_path: Path | str | None = None, **kwargs) -> SimProcess:
        """Run ``argv`` inside ``host``'s namespaces.

        ``env`` is the program's whole environment (default: a minimal one with
        this Python's bin directory first on PATH).  With ``log_path``, stdout
        and stderr go to that file; otherwise ``kwargs`` go to ``Popen``.
        """
        pid = self._init_pid(host)
        cmd = ["nsenter", "--target", str(pid), "--net", "--pid", "--uts", "--mount", "--ipc", "--", *argv]
        if log_path is not None:
            log_path = Path(log_path)
            f = open(log_path, "wb")
            kwargs.setdefault("stdout", f)
            kwargs.setdefault("stderr", subprocess.STDOUT)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        try:
            proc = spawn(cmd, env=dict(env) if env is not None else self.default_env(), **kwargs)
        finally:
            if log_path is not None:
                f.close()
        return SimProcess(host=host, popen=proc, log_path=log_path, clock=self.clock)

    def run(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` to completion and capture its output."""
        p = self.popen(host, argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.popen.kill()
            out, err = p.popen.communicate()
            raise SimError(f"{argv!r} on {host} ran past {timeout} s; output so far: {out[-500:]}{err[-500:]}")
        return subprocess.CompletedProcess(argv, p.popen.returncode, out, err)

    def start_entrypoints(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                          hosts: Sequence[str] | None = None, *, split_output: bool = False
                          ) -> dict[str, SimProcess]:
        """Start ``argv`` on every host at once, as SageMaker starts a job's container on each host.

        ``${host_opt_ml}`` in ``argv`` becomes the host's /opt/ml as this machine sees it, so paths the
        program prints exist here.  Each runs in its own session: a Ctrl-C on the terminal reaches only
        the caller, which stops the hosts as the platform does (SIGTERM, then a grace period).
        Output of each goes to ``<host dir>/entrypoint.log``; with ``split_output`` only its stderr
        (the entrypoint's own lines, mpirun's messages), and its stdout (what the ranks print) to
        ``<host dir>/entrypoint.out``, so the caller can keep the two streams apart as the other
        targets do.
        """
        chosen = list(hosts) if hosts is not None else [h.name for h in self.hosts]
        procs = {}
        for h in chosen:
            d = self.host(h).dir
            argv_h = [a.replace(HOST_OPT_ML, str(self.host(h).opt_ml)) for a in argv]
            if not split_output:
                procs[h] = self.popen(h, argv_h, env, log_path=d / "entrypoint.log", start_new_session=True)
                continue
            with open(d / "entrypoint.out", "wb") as out, open(d / "entrypoint.log", "wb") as err:
                procs[h] = self.popen(h, argv_h, env, stdout=out, stderr=err, start_new_session=True)
                procs[h].log_path = d / "entrypoint.log"
        return procs

    def write_job_secret(self, secret_text: str) -> None:
        """Deliver the job secret to every host's ``mpirun-keys`` input channel, as `keys install --sagemaker`
        does for a SageMaker job: the workers then authenticate on the result channel.  Removed by ``down``."""
        for h in self.hosts:
            path = job_secret_file(h)
            path.parent.mkdir(parents=True, exist_ok=True)
            _write(path, secret_text, 0o600)

    def default_env(self) -> dict[str, str]:
        return {"PATH": host_path(), "HOME": "/root", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}

    def write_sagemaker_config(self, hyperparameters: Mapping[str, str] | None = None,
                               input_data_config: Mapping | None = None) -> None:
        """Write each host's /opt/ml/input/config/{resourceconfig,hyperparameters,inputdataconfig}.json."""
        for h in self.hosts:
            cfg = h.opt_ml / "input" / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            _write(cfg / "resourceconfig.json", render_resource_config(self.layout, h))
            # The LaunchSpec in it carries the env's real values, secret-looking ones too: only its user reads it.
            _write(cfg / "hyperparameters.json", json.dumps(dict(hyperparameters or {}), indent=2), 0o600)
            _write(cfg / "inputdataconfig.json", json.dumps(dict(input_data_config or {}), indent=2))

    # -- faults -----------------------------------------------------------------
    def stop_sshd(self, host: str) -> None:
        """Stop ``host``'s sshd listener; existing sessions stay."""
        import psutil  # here, not at the top: submit imports this module for sweep_orphans alone
        cfg = str(self.host(host).sshd_config)
        killed = []
        for pid in _netns_pids(self.host(host).netns):
            try:
                p = psutil.Process(pid)
                if cfg in " ".join(p.cmdline()):
                    p.kill()
                    killed.append(p)
            except psutil.NoSuchProcess:
                pass
        # Only once it is gone is its port closed: a connection made before then would still succeed.
        psutil.wait_procs(killed, timeout=10)

    def kill_host(self, host: str) -> None:
        """Power ``host`` off: every process on it dies at once (its PID 1 is killed)."""
        import psutil  # here, not at the top: submit imports this module for sweep_orphans alone
        pid = self._init_pid(host)
        os.kill(pid, signal.SIGKILL)
        psutil.wait_procs([psutil.Process(pid)], timeout=10) if psutil.pid_exists(pid) else None

    def partition(self, host: str) -> None:
        """Cut ``host`` off the network without closing its connections (no FIN, no RST)."""
        h = self.host(host)
        _run(["ip", "-n", self.layout.switch_netns, "link", "set", h.switch_port, "down"])

    # -- internals --------------------------------------------------------------
    def _init_pid(self, host: str) -> int:
        import psutil  # here, not at the top: submit imports this module for sweep_orphans alone
        self.host(host)
        pid = self._init_pids.get(host)
        if pid is None or not psutil.pid_exists(pid):
            raise SimError(f"host {host} of sim cluster {self.name!r} is not running; "
                           "bring the cluster up first (or it was killed)")
        return pid

    def _write_files(self) -> None:
        L = self.layout
        L.root.mkdir(parents=True, exist_ok=True)
        _write(L.hosts_file, render_hosts_file(L))
        if L.cluster_key.exists():
            L.cluster_key.unlink()
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"sim-{L.name}", "-f", str(L.cluster_key)])
        pubs: dict[str, str] = {}
        for h in self.hosts:
            h.dir.mkdir(parents=True, exist_ok=True)
            os.chmod(h.dir, 0o755)
            for sub in ("input/config", "input/data", "output", "model", "checkpoints"):
                (h.opt_ml / sub).mkdir(parents=True, exist_ok=True)
            if h.host_key.exists():
                h.host_key.unlink()
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.name, "-f", str(h.host_key)])
            pubs[h.name] = Path(str(h.host_key) + ".pub").read_text()
            _write(h.sshd_config, render_sshd_config(h))
        client = render_ssh_client_config()
        known = render_known_hosts(L, pubs)
        key = L.cluster_key.read_text()
        pub = Path(str(L.cluster_key) + ".pub").read_text()
        for h in self.hosts:
            h.ssh_dir.mkdir(exist_ok=True)
            os.chmod(h.ssh_dir, 0o700)
            _write(h.ssh_dir / "id_ed25519", key, 0o600)
            _write(h.ssh_dir / "id_ed25519.pub", pub, 0o644)
            _write(h.ssh_dir / "authorized_keys", pub, 0o600)
            _write(h.ssh_dir / "known_hosts", known, 0o644)
            _write(h.ssh_dir / "config", client, 0o600)
        self.write_sagemaker_config()

    def _make_network(self) -> None:
        L = self.layout
        sw = L.switch_netns
        _run(["ip", "netns", "add", sw])
        _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", sw, "link", "set", "br0", "up"])
        for h in self.hosts:
            _run(["ip", "netns", "add", h.netns])
            # Create the pair inside the switch namespace with its peer placed in the
            # host: nothing ever appears in the machine's own namespace.
            _run(["ip", "-n", sw, "link", "add", h.switch_port, "type", "veth", "peer", "name", HOST_IFNAME,
                  "netns", h.netns])
            _run(["ip", "-n", sw, "link", "set", h.switch_port, "master", "br0", "up"])
            _run(["ip", "-n", h.netns, "addr", "add", f"{h.address}/24", "dev", HOST_IFNAME])
            _run(["ip", "-n", h.netns, "link", "set", HOST_IFNAME, "up"])
            _run(["ip", "-n", h.netns, "link", "set", "lo", "up"])

    def _start_init(self, h: SimHost, sshd: str) -> subprocess.Popen:
        cfg = {
            "name": h.name, "address": h.address, "hosts_file": str(self.layout.hosts_file),
            "opt_ml": str(h.opt_ml), "ssh_dir": str(h.ssh_dir), "sshd": sshd,
            "sshd_config": str(h.sshd_config), "sshd_log": str(h.dir / "sshd.log"),
            "ready_file": str(h.dir / "ready"), "start_sshd": h.name in self.start_sshd,
        }
        cfg_path = h.dir / "hostinit.json"
        _write(cfg_path, json.dumps(cfg, indent=2))
        ready = h.dir / "ready"
        if ready.exists():
            ready.unlink()
        argv = ["ip", "netns", "exec", h.netns, "unshare", "--pid", "--fork", "--mount-proc", "--uts",
                "--mount", "--kill-child", "--", sys.executable, "-m", "mpirun_kit.sim.hostinit", str(cfg_path)]
        if self.owner is not None:
            # The owner's death SIGKILLs unshare (ip execs it), whose --kill-child SIGKILLs the host's PID 1,
            # and with it every process of the host: nothing of a job runs on once its submit is gone.
            death = signal.SIGKILL
        else:
            death = None
        logf = open(h.dir / "hostinit.log", "wb")
        try:
            return start_process(argv, env=self._init_env(), parent_death_signal=death, stdin=subprocess.DEVNULL,
                                 stdout=logf, stderr=subprocess.STDOUT)
        finally:
            logf.close()

    def _init_env(self) -> dict[str, str]:
        env = self.default_env()
        # hostinit imports this package; make sure it resolves the same copy.
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_root
        return env

    def _wait_ready(self) -> None:
        import psutil  # here, not at the top: submit imports this module for sweep_orphans alone
        deadline = Deadline(self.clock, self.up_timeout)
        pending = {h.name for h in self.hosts}
        while pending:
            for name in sorted(pending):
                h = self.host(name)
                ready = h.dir / "ready"
                if ready.exists():
                    state = json.loads(ready.read_text())
                    if not state.get("ok"):
                        raise SimError(f"host {name} failed to come up: {state.get('error')}; "
                                       f"logs in {h.dir}")
                    pending.discard(name)
                elif self._inits[name].poll() is not None:
                    tail = (h.dir / "hostinit.log").read_text(errors="replace")[-800:]
                    raise SimError(f"host {name} failed to come up (init exited {self._inits[name].returncode}): "
                                   f"{tail}")
            if pending and self.cancelled is not None and self.cancelled():
                raise SimStopped(f"the bring-up of sim cluster {self.name!r} was stopped")
            if pending and deadline.expired():
                raise SimError(f"hosts {sorted(pending)} of sim cluster {self.name!r} did not come up within "
                               f"{self.up_timeout:.0f} s; logs in {self.layout.root}")
            if pending:
                self.clock.sleep(0.02)
        for h in self.hosts:
            kids = psutil.Process(self._inits[h.name].pid).children()
            if not kids:
                raise SimError(f"host {h.name}: its init process vanished after coming up")
            self._init_pids[h.name] = kids[0].pid

    def _save_state(self) -> None:
        _write(self.layout.state_file, json.dumps({
            "name": self.name, "n_hosts": len(self.hosts), "instance_type": self.layout.instance_type,
            "init_pids": self._init_pids,
            "hosts": {h.name: h.address for h in self.hosts},
        }, indent=2))
