"""Frozen values shared by every layer: what to launch (LaunchSpec).

``LaunchSpec`` is the contract between whoever says *what* to run (CLI flags,
SageMaker hyperparameters, the YAML job layer in spec/) and the per-host
entrypoint that runs it.  It carries no host list: the cluster comes from
discovery, and plan/ combines the two into a ``LaunchPlan``.

It travels between machines as JSON (a SageMaker hyperparameter is a string), so
``to_json``/``from_json`` round-trip exactly and reject unknown keys.  Its fields are declared once
(shape.key): launch_schema.py makes the schema a serialized LaunchSpec is checked against from them,
and ``from_dict`` builds the value with shape.decode.
"""
# No ``from __future__ import annotations`` here: the fields' types are then real types, which shape.py reads
# without evaluating strings (about 1 ms of CPU per entrypoint, on the launch's critical path).
import json
from dataclasses import asdict, dataclass
from typing import Mapping

from ..errors import SpecError
from .shape import NAME, decode, key


def parse_json_object(text: str, source: str, expected: str) -> dict:
    """``text`` as a JSON object; a SpecError naming ``source`` and what was ``expected`` otherwise."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{source}: not valid JSON ({exc}); expected {expected}") from exc
    if not isinstance(raw, dict):
        raise SpecError(f"{source}: expected a JSON object, got {type(raw).__name__}")
    return raw

#: hyperparameters.json key under which a serialized LaunchSpec travels.
LAUNCH_SPEC_HYPERPARAMETER = "mpirun_kit_launch"


#: timeouts.stall_s's default (seconds), and hang_abort_s's as a multiple of stall_s (docs: timeline-and-hangs.md).
DEFAULT_STALL_S = 300.0
HANG_ABORT_FACTOR = 2.0


@dataclass(frozen=True)
class Timeouts:
    """Every wait of the launcher, in seconds.  ``None`` means no limit."""

    #: master: all workers' sshd answering.  Scaled: base + per_host * N.
    ssh_ready_s: float = key(120.0, exclusive_minimum=0)
    ssh_ready_per_host_s: float = key(1.0, minimum=0)
    #: worker: the MPI daemon appearing after the worker is up.
    daemon_wait_s: float = key(300.0, exclusive_minimum=0)
    daemon_wait_per_host_s: float = key(1.0, minimum=0)
    #: worker: hearing from the master at all, and between its heartbeats.
    master_connect_s: float = key(300.0, exclusive_minimum=0)
    master_silence_s: float = key(15.0, exclusive_minimum=0)
    #: master: hearing from each worker (its heartbeats); a worker silent this long is lost.
    worker_silence_s: float = key(15.0, exclusive_minimum=0)
    #: the job itself (mpirun start to exit).
    job_s: float | None = key(None, exclusive_minimum=0)
    #: SIGTERM to ranks, then SIGKILL after this long.
    grace_s: float = key(10.0, minimum=0)
    #: master: no rank advanced its progress.step for this long (or one rank fell this far behind), or, for a
    #: program that reports nothing, no rank changed as seen from outside (no I/O, the same stacks): write a
    #: hang report with every affected rank's stacks (observe/hang.py).  On by default.  300 s: watching a
    #: silent rank from outside costs about 0.12 % of a core per rank at 300 s (a read every 60 s; 0.060 % at
    #: 600 s, 1.27 % at 10 s: docs/benchmarks.md "Hang sampling"), and a false report costs a reader's time.
    stall_s: float = key(DEFAULT_STALL_S, exclusive_minimum=0)
    #: master: a stall still there this long after its report stops the job (exit code 76, hung).  None (the
    #: default): 2 x stall_s, so no silent hang holds its GPUs for ever; 0: never (a report only).
    hang_abort_s: float | None = key(None, minimum=0)

    def hang_abort_after(self) -> float | None:
        """Seconds from a hang report to the job's stop (``hang_abort_s``, default 2 x ``stall_s``); None: never."""
        if self.hang_abort_s is None:
            return HANG_ABORT_FACTOR * self.stall_s
        return self.hang_abort_s or None


@dataclass(frozen=True)
class LaunchSpec:
    """What every rank runs and how mpirun runs it; no hosts, no cluster facts."""

    program: tuple[str, ...] = key(min_items=1)
    #: ranks per host; None = the GPU count found with NVML, else 1.
    processes_per_host: int | None = key(None, minimum=1)
    #: environment set for every rank, name -> value (after presets and user overrides).
    env: tuple[tuple[str, str], ...] = key((), names=NAME)
    #: names copied from the launching host's environment, when set there.
    env_forward: tuple[str, ...] = key((), items=NAME)
    #: every rank gets the launching host's whole environment (less secret-looking names, AWS credentials and
    #: another launcher's state, each named in the plan), as torchrun's ranks do; False: the allow-list
    #: (plan/env.py).  The job layer sets it for target local, whose launching host is the submitting shell's.
    env_inherit: bool = False
    #: "srun": inside a Slurm job (plan/srun.py)
    mpi_flavour: str = key("auto", enum=("auto", "openmpi4", "openmpi5", "mpich", "srun"))
    #: how mpirun starts its daemons on the other hosts: "ssh" (the master first waits for every worker's
    #: sshd) or "slurm" (inside a Slurm allocation mpirun starts them with srun: no sshd is needed)
    daemons_via: str = key("ssh", enum=("ssh", "slurm"))
    #: extra mpirun arguments, appended verbatim after the built ones.
    mpi_options: tuple[str, ...] = ()
    #: MCA parameters (Open MPI), name -> value; user values override built-in ones.
    mca: tuple[tuple[str, str], ...] = ()
    #: "auto" pins each rank to its GPU and that GPU's NUMA-local CPUs; "none" leaves it.
    pinning: str = key("auto", enum=("auto", "none"))
    working_dir: str | None = None
    timeouts: Timeouts = key(factory=Timeouts)
    #: TCP port of the master's result channel on the cluster network; None (the default) = one per job, so jobs
    #: that share a host never collide: a single-host job's master binds a free port (the kernel's choice) and
    #: hands it to its ranks; a multi-host job's every host derives the same port from the job secret
    #: (entrypoint/common.py ``job_result_port``).  Set it only where a firewall needs a fixed port.
    result_port: int | None = key(None, minimum=1, maximum=65535)
    #: ssh port the workers' sshd listens on.
    ssh_port: int = key(22, minimum=1, maximum=65535)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "launch spec") -> "LaunchSpec":
        return cls.from_dict(parse_json_object(text, source, "a serialized LaunchSpec"), source)

    @classmethod
    def from_hyperparameters(cls, raw: Mapping, source: str) -> "LaunchSpec | None":
        """Find the LaunchSpec in a hyperparameters.json dict; None when the key is absent.

        SageMaker stores every hyperparameter as a string, and the Python SDK JSON-encodes
        each value, so the spec may arrive as an object, a JSON string, or a JSON string
        holding a JSON string; all three are accepted.

        Raises:
            SpecError: the value is not a valid serialized LaunchSpec.
        """
        if LAUNCH_SPEC_HYPERPARAMETER not in raw:
            return None
        where = f"{source}: key {LAUNCH_SPEC_HYPERPARAMETER!r}"
        value = raw[LAUNCH_SPEC_HYPERPARAMETER]
        for _ in range(2):
            if not isinstance(value, str):
                break
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{where}: not valid JSON ({exc.msg}); expected a LaunchSpec serialized with "
                                "LaunchSpec.to_json()") from exc
        if not isinstance(value, Mapping):
            raise SpecError(f"{where}: expected a JSON object (a serialized LaunchSpec), got {type(value).__name__}")
        return cls.from_dict(dict(value), where)

    @classmethod
    def from_dict(cls, raw: dict, source: str = "launch spec") -> "LaunchSpec":
        """Build from a decoded JSON object, checked first against ``spec.launch_schema.LAUNCH_SCHEMA``.

        Raises:
            SpecError: naming ``source``, every offending key, what was expected and what was found.
        """
        from .launch_schema import LAUNCH_SCHEMA, surely_valid  # it imports this module: import at call time

        if not isinstance(raw, dict):
            raise SpecError(f"{source}: expected a JSON object (a serialized LaunchSpec), got {type(raw).__name__}")
        problems: list[str] = []
        if not surely_valid(raw, LAUNCH_SCHEMA):  # the fast path every entrypoint takes (launch_schema.py says why)
            from .findings import launch_spec_findings  # jsonschema, the authority, names every problem

            problems = launch_spec_findings(raw, source)
        if problems:
            head = f"{source}: invalid launch spec ({len(problems)} problem(s)):\n  " if len(problems) > 1 else ""
            raise SpecError(head + "\n  ".join(problems[:20]) + "\nwrite it with LaunchSpec.to_json() "
                            "(or fix the keys named above)")
        return decode(cls, raw)
