"""A real Slurm (Debian's 22.05 daemons, munge) inside a simulated cluster: ``sim up --slurm``.

Place in the data flow: ``SimCluster`` (cluster.py) gives the hosts; ``plan_slurm`` (pure) renders
slurm.conf, mpi.conf and the per-host paths as a ``SlurmLayout`` value; ``SlurmCluster.up()`` writes
them, starts one ``munged`` per host (all sharing one key made for the cluster), ``slurmctld`` on
algo-1 (and, with ``accounting``, MariaDB and ``slurmdbd`` there, so ``sacct`` answers) and one
``slurmd`` per host, each inside its host's namespaces through ``SimCluster.popen`` (nsenter: ``ip
netns exec`` would remount /sys and slurmd needs the machine's cgroup mounts), then waits, bounded,
until ``sinfo`` shows every node idle.  The slurm target (targets/slurm/) then submits to it
like to any cluster: from algo-1, the login node.

Everything lives under each host's directory of the sim cluster (``algo-N/slurm``): spool, state,
logs, the munge key, the database.  Daemons run in the hosts' network namespaces, so the cluster's
``down`` (which kills every process there by pid) stops them; ``SlurmCluster.down`` also removes
those directories, the key first.  Per host, ``/run`` is private (hostinit), so pid files, munge's
socket and PMIx's client directory sit there: a shared path breaks PMIx ("Cannot create directory
/tmp/spmix_appdir_...: File exists").

What the daemons need here (measured; docs/guide/slurm.md): ``ProctrackType=proctrack/linuxproc``
and ``TaskPlugin=task/none`` (no cgroup hierarchy of the host's own), ``SlurmdParameters=
config_overrides`` (each host sees the machine's CPUs; the config's count is used), ``MpiDefault=pmix``
(Debian's Open MPI has no PMI-2), and low ``SlurmdTimeout``, ``MessageTimeout``, credential expiry and
backfill interval so failures are noticed, and requeues run again, within seconds.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..core.files import write_atomic
from .cluster import SimCluster, SimError, SimProcess, host_path
from .layout import SimLayout

log = logging.getLogger(__name__)

#: the daemons and clients ``up`` needs (Debian: slurmctld, slurmd, slurm-client, munge; slurmdbd and
#: mariadb-server for accounting).
DAEMONS = ("slurmctld", "slurmd", "munged", "sinfo", "sbatch", "scontrol")
ACCOUNTING_DAEMONS = ("slurmdbd", "mariadbd", "mariadb-install-db")
#: CPUs each simulated node declares (config_overrides: the machine's own count does not matter).
NODE_CPUS = 8
NODE_MEMORY_MB = 4000
PARTITION = "debug"
#: an account the accounting database knows (``--account`` checks need one; tests use it).
ACCOUNT = "research"
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819


@dataclass(frozen=True)
class SlurmLayout:
    """Paths and file contents of the Slurm of one sim cluster (a value: nothing is written)."""

    cluster: str
    controller: str              # algo-1: slurmctld (and slurmdbd), the login node
    hosts: tuple[str, ...]
    addresses: tuple[str, ...]
    base: Path                   # <algo-1 dir>/slurm: the shared files
    host_dirs: tuple[Path, ...]  # <algo-N dir>/slurm: each host's spool and logs
    accounting: bool

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def munge_key(self) -> Path:
        return self.base / "munge.key"

    @property
    def state_dir(self) -> Path:
        return self.base / "ctld-state"

    @property
    def db_dir(self) -> Path:
        return self.base / "mariadb"

    @property
    def db_socket(self) -> str:
        # Inside algo-1's private /run: nothing outside the host reaches the database.
        return "/run/mysqld/mysqld.sock"

    def host_dir(self, host: str) -> Path:
        return self.host_dirs[self.hosts.index(host)]

    def client_env(self) -> dict[str, str]:
        """What a Slurm client (sbatch, squeue, ...) on a host of this cluster needs: its slurm.conf.

        TMPDIR is each host's private /dev/shm: sbatch passes it to the job, and Open MPI keys a direct-launched
        rank's session directory by host name and pid (``/tmp/ompi.algo-1.0/pid.16``); in a shared /tmp, the
        same name and pid in another sim host's PID namespace (this cluster's next job, another cluster)
        would share that directory, and the ranks crash (SIGSEGV) at their first message."""
        return {"PATH": host_path(), "HOME": "/root", "LANG": "C.UTF-8", "SLURM_CONF": str(self.conf),
                "TMPDIR": "/dev/shm"}


def plan_slurm(layout: SimLayout, accounting: bool = False) -> SlurmLayout:
    """The Slurm of sim cluster ``layout``: slurmctld on its first host, slurmd on every host."""
    first = layout.hosts[0]
    return SlurmLayout(cluster=f"sim{layout.name}"[:40], controller=first.name,
                       hosts=tuple(h.name for h in layout.hosts), addresses=tuple(h.address for h in layout.hosts),
                       base=first.dir / "slurm", host_dirs=tuple(h.dir / "slurm" for h in layout.hosts),
                       accounting=accounting)


def render_slurm_conf(s: SlurmLayout) -> str:
    """slurm.conf: one partition over every host; per-host paths through %n (the node's name)."""
    # SlurmdSpoolDir/SlurmdLogFile: <sim root>/<node>/slurm/..., since every host dir is <root>/algo-N.
    root = s.host_dirs[0].parent.parent
    nodes = "\n".join(f"NodeName={h} NodeAddr={a} CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} State=UNKNOWN"
                      for h, a in zip(s.hosts, s.addresses))
    acct = ([f"AccountingStorageType=accounting_storage/slurmdbd", f"AccountingStorageHost={s.controller}",
             f"AccountingStoragePort={SLURMDBD_PORT}", "AccountingStorageEnforce=associations",
             "JobAcctGatherType=jobacct_gather/none"]
            if s.accounting else ["AccountingStorageType=accounting_storage/none",
                                  "JobAcctGatherType=jobacct_gather/none"])
    return "\n".join([
        f"ClusterName={s.cluster}",
        f"SlurmctldHost={s.controller}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # A requeued job may run again once its credential expired: 5 s (Slurm's least), not the default 120 s.
        "AuthInfo=cred_expire=5",
        f"StateSaveLocation={s.state_dir}",
        f"SlurmdSpoolDir={root}/%n/slurm/spool",
        f"SlurmctldLogFile={s.base / 'slurmctld.log'}",
        f"SlurmdLogFile={root}/%n/slurm/slurmd.log",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "MpiDefault=pmix",
        "SwitchType=switch/none",
        "SchedulerType=sched/backfill",
        # A requeued job whose begin time passed starts at the next backfill pass: every second, not every 30 s
        # (the main scheduler runs on events only, and a begin time passing is none).
        "SchedulerParameters=bf_interval=1",
        "ReturnToService=2",
        # A host killed mid-job is DOWN (and its job requeued) ~17 s later instead of 5 min: slurmctld pings a
        # node silent for SlurmdTimeout/3, a ping to a dead slurmd fails only after MessageTimeout (connect
        # retries), and the node is DOWN once silent SlurmdTimeout at a ping (measured: 27 s with 10/10, 17 s
        # with 5/5, 13 s with 5/3; 5 s leaves a loaded 2-core machine's RPCs their margin).
        "SlurmdTimeout=5",
        "MessageTimeout=5",
        "SlurmctldTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=600",
        "JobRequeue=1",
        "JobCompType=jobcomp/none",
        *acct,
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        nodes,
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def render_mpi_conf() -> str:
    """mpi.conf: PMIx's client directory on each host's private /run (a shared one collides)."""
    return "PMIxCliTmpDirBase=/run/slurm-pmix\n"


def render_slurmdbd_conf(s: SlurmLayout) -> str:
    return "\n".join([
        "AuthType=auth/munge",
        f"DbdHost={s.controller}",
        f"DbdPort={SLURMDBD_PORT}",
        "SlurmUser=root",
        f"LogFile={s.base / 'slurmdbd.log'}",
        "PidFile=/run/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        f"StorageLoc=slurm_acct_db",
        "StorageUser=root",
        f"StorageHost=localhost",
        "",
    ])


class SlurmCluster:
    """Slurm on a running ``SimCluster``: ``up()`` starts the daemons, ``down()`` stops them and removes their files.

    Args:
        sim: the simulated cluster (already up).
        accounting: also start MariaDB and slurmdbd on the controller, so ``sacct`` answers (~4 s more).
        clock: injected time for every wait.
        up_timeout: seconds allowed for every node to be idle.
    """

    def __init__(self, sim: SimCluster, *, accounting: bool = False, clock: Clock = SYSTEM_CLOCK,
                 up_timeout: float = 60.0):
        self.sim = sim
        self.layout = plan_slurm(sim.layout, accounting)
        self.clock = clock
        self.up_timeout = up_timeout
        self._procs: list[SimProcess] = []

    # -- values ---------------------------------------------------------------
    @property
    def login(self) -> str:
        """The host clients run on (sbatch, squeue): the controller."""
        return self.layout.controller

    def env(self) -> dict[str, str]:
        return self.layout.client_env()

    # -- lifecycle --------------------------------------------------------------
    def up(self) -> "SlurmCluster":
        """Write the configuration, start munge, the controller (and accounting) and every slurmd; wait for idle nodes.

        Raises:
            SimError: a program is missing, or a daemon did not start (its log is named).
        """
        need = DAEMONS + (ACCOUNTING_DAEMONS if self.layout.accounting else ())
        missing = [p for p in need if shutil.which(p, path=host_path()) is None]
        if missing:
            raise SimError(f"Slurm programs not found: {', '.join(missing)}; install the Debian packages slurmctld "
                           "slurmd slurm-client munge (and slurmdbd mariadb-server for accounting): "
                           "bash ops/quickstart.sh setup does")
        try:
            return self._up()
        except BaseException:
            # nothing of a failed bring-up stays: its daemons stopped, its files (the key first) deleted
            self.down()
            raise

    def _up(self) -> "SlurmCluster":
        self._write_files()
        for h in self.layout.hosts:
            self._host_run(h, ["mkdir", "-p", "/run/munge", "/run/slurm-pmix", "/run/mysqld"])
            self._mount_cgroup(h)
            self._mount_etc(h)
            self._start(h, "munged", ["munged", "-F", "--force", f"--key-file={self.layout.munge_key}",
                                      "--socket=/run/munge/munge.socket.2", "--pid-file=/run/munge/munged.pid",
                                      f"--seed-file={self.layout.host_dir(h) / 'munge.seed'}",
                                      f"--log-file={self.layout.host_dir(h) / 'munged.log'}"])
        for h in self.layout.hosts:
            self._wait_for_file(h, "/run/munge/munge.socket.2", "munged")
        if self.layout.accounting:
            self._start_accounting()
        c = self.layout.controller
        self._start(c, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.layout.conf)])
        for h in self.layout.hosts:
            self.start_slurmd(h)
        self.wait_idle()
        if self.layout.accounting:
            self._add_account()
        log.info("slurm up on sim cluster %s: %s", self.sim.name, ", ".join(self.layout.hosts))
        return self

    def start_slurmd(self, host: str) -> None:
        """Start ``host``'s slurmd (again: a test that killed it, as a node failure does, brings it back; the dead
        one is forgotten, so ``wait_idle`` does not take it for a daemon that failed to start)."""
        self._procs = [p for p in self._procs
                       if not (p.host == host and getattr(p, "what", "") == "slurmd" and p.poll() is not None)]
        self._start(host, "slurmd", ["slurmd", "-D", "-f", str(self.layout.conf)])

    def down(self) -> None:
        """Stop every Slurm daemon (and munge, MariaDB) and remove their files; idempotent.

        The daemons live in the hosts' namespaces, so the sim cluster's own ``down`` would kill them too;
        this stops them first, so nothing of Slurm outlives its spool directories.
        """
        for p in self._procs:
            if p.poll() is None:
                try:
                    p.popen.kill()
                except OSError:
                    pass
        for p in self._procs:
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        remove_files(self.sim.layout)

    # -- internals --------------------------------------------------------------
    def _write_files(self) -> None:
        s = self.layout
        remove_files(self.sim.layout)
        for d in (s.base / "etc", s.state_dir, *s.host_dirs, *(hd / "spool" for hd in s.host_dirs)):
            d.mkdir(parents=True, exist_ok=True)
        write_atomic(s.conf, render_slurm_conf(s), 0o644)
        write_atomic(s.conf.parent / "mpi.conf", render_mpi_conf(), 0o644)
        if s.accounting:
            write_atomic(s.conf.parent / "slurmdbd.conf", render_slurmdbd_conf(s), 0o600)
        write_atomic(s.munge_key, os.urandom(1024), 0o400)

    def _mount_cgroup(self, host: str) -> None:
        """slurmd 22.05 insists on a cgroup file system at /sys/fs/cgroup even with proctrack/linuxproc; the host's
        mount namespace was made under ``ip netns exec``, which mounted a fresh /sys without one.  A tmpfs and
        the named v1 hierarchy ``systemd`` (no controller, so nothing is limited) satisfy it, in that host only."""
        if self.sim.run(host, ["mountpoint", "-q", "/sys/fs/cgroup/systemd"], env=self.env()).returncode == 0:
            return
        self._host_run(host, ["mount", "-t", "tmpfs", "-o", "mode=0755", "cgroup_root", "/sys/fs/cgroup"])
        self._host_run(host, ["mkdir", "-p", "/sys/fs/cgroup/systemd"])
        self._host_run(host, ["mount", "-t", "cgroup", "-o", "none,name=systemd", "cgroup", "/sys/fs/cgroup/systemd"])

    def _mount_etc(self, host: str) -> None:
        """The cluster's configuration at /etc/slurm, in that host only (its own mount namespace): a client started
        without SLURM_CONF, as in an ssh session to the login node (target.slurm.login), finds it where Debian's
        Slurm looks, as on a real cluster.  A machine without /etc/slurm keeps it unchanged (SLURM_CONF then)."""
        if self.sim.run(host, ["test", "-d", "/etc/slurm"], env=self.env()).returncode == 0:
            self._host_run(host, ["mount", "--bind", str(self.layout.conf.parent), "/etc/slurm"])

    def _host_run(self, host: str, argv: list[str]) -> subprocess.CompletedProcess:
        res = self.sim.run(host, argv, env=self.env(), timeout=60)
        if res.returncode != 0:
            raise SimError(f"`{' '.join(argv)}` on {host} failed (exit {res.returncode}): {res.stderr.strip()[-400:]}")
        return res

    def _start(self, host: str, what: str, argv: list[str]) -> SimProcess:
        logp = self.layout.host_dir(host) / f"{what}.out"
        p = self.sim.popen(host, argv, env=self.env(), log_path=logp, start_new_session=True)
        p.what = what  # type: ignore[attr-defined]
        self._procs.append(p)
        return p

    def _check_alive(self) -> None:
        for p in self._procs:
            if p.poll() is not None:
                what = getattr(p, "what", "daemon")
                raise SimError(f"{what} on {p.host} exited with {p.returncode} while Slurm was starting: "
                               f"{p.output()[-600:].strip()} (logs in {self.layout.host_dir(p.host)})")

    def _wait_for_file(self, host: str, path: str, what: str) -> None:
        deadline = Deadline(self.clock, self.up_timeout)
        while self.sim.run(host, ["test", "-S", path], env=self.env()).returncode != 0:
            self._check_alive()
            if deadline.expired():
                raise SimError(f"{what} on {host} did not create {path} within {self.up_timeout:g} s; "
                               f"see {self.layout.host_dir(host)}")
            self.clock.sleep(0.05)

    def wait_idle(self) -> None:
        """Wait, bounded by ``up_timeout``, until ``sinfo`` shows every node idle (ReturnToService=2 returns a node
        that was DOWN once its slurmd registers again).

        Raises:
            SimError: a daemon exited, or a node was not idle in time (sinfo's last answer is named).
        """
        deadline = Deadline(self.clock, self.up_timeout)
        last = ""
        while True:
            self._check_alive()
            res = self.sim.run(self.login, ["sinfo", "--noheader", "-N", "-o", "%N %t"], env=self.env())
            states = dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)
            last = res.stdout.strip() or res.stderr.strip()
            if res.returncode == 0 and all(states.get(h) == "idle" for h in self.layout.hosts):
                return
            if deadline.expired():
                raise SimError(f"Slurm nodes of sim cluster {self.sim.name!r} not idle within {self.up_timeout:g} s "
                               f"(sinfo: {last[-400:]}); logs in {self.layout.base} and each host's slurm/ directory")
            self.clock.sleep(0.1)

    def _start_accounting(self) -> None:
        s = self.layout
        c = s.controller
        s.db_dir.mkdir(parents=True, exist_ok=True)
        self._host_run(c, ["mariadb-install-db", "--user=root", f"--datadir={s.db_dir}", "--auth-root-authentication-method=socket",
                           "--skip-test-db"])
        self._start(c, "mariadbd", ["mariadbd", "--user=root", f"--datadir={s.db_dir}", "--skip-networking",
                                    f"--socket={s.db_socket}", "--pid-file=/run/mysqld/mysqld.pid",
                                    f"--log-error={s.base / 'mariadb.err'}"])
        self._wait_for_file(c, s.db_socket, "mariadbd")
        self._start(c, "slurmdbd", ["slurmdbd", "-D"])
        deadline = Deadline(self.clock, self.up_timeout)
        while self.sim.run(c, ["sacctmgr", "-i", "-n", "show", "cluster"], env=self.env()).returncode != 0:
            self._check_alive()
            if deadline.expired():
                raise SimError(f"slurmdbd on {c} did not answer within {self.up_timeout:g} s; see {s.base}")
            self.clock.sleep(0.1)
        self._host_run(c, ["sacctmgr", "-i", "add", "cluster", s.cluster])

    def _add_account(self) -> None:
        c = self.layout.controller
        self._host_run(c, ["sacctmgr", "-i", "add", "account", ACCOUNT, f"cluster={self.layout.cluster}"])
        self._host_run(c, ["sacctmgr", "-i", "add", "user", "root", f"account={ACCOUNT}",
                           f"cluster={self.layout.cluster}"])


def remove_files(layout: SimLayout) -> None:
    """Delete every host's ``slurm/`` directory of sim cluster ``layout`` (the munge key first)."""
    s = plan_slurm(layout)
    s.munge_key.unlink(missing_ok=True)
    for d in s.host_dirs:
        shutil.rmtree(d, ignore_errors=True)


def state(layout: SimLayout) -> dict | None:
    """What ``sim up --slurm`` recorded for a cluster brought up earlier: the login host and client env."""
    s = plan_slurm(layout)
    if not s.conf.is_file():
        return None
    return {"login": s.controller, "env": s.client_env(), "conf": str(s.conf), "partition": PARTITION,
            "nodes": list(s.hosts)}

