"""The cluster as it is, read before sbatch (never assumed), and what it cannot run, refused in one line.

Place in the data flow: target.py's ``submit`` calls ``discover`` (scontrol show config, sinfo, srun --mpi=list
through the runner), ``check_request`` (partition, size, PMIx), ``for_cluster`` (the GPU option's form by the
cluster's version), and, when sbatch refuses, ``sbatch_error`` names the field to fix.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass

from ...errors import ClusterError, SpecError
from ..base import DryRun
from .accounting import Partition, parse_mpi_list, parse_scontrol_config, parse_sinfo_json, parse_sinfo_text
from .runner import Runner
from .script import SlurmRequest, gpu_option

# --- discovery and checks ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClusterFacts:
    version: str
    mpi_default: str
    partitions: tuple[Partition, ...]
    accounting: bool
    #: what ``srun --mpi=list`` offers; None: srun could not say (nothing is refused on it then)
    mpi_plugins: tuple[str, ...] | None = None

    def partition(self, name: str | None) -> Partition | None:
        for p in self.partitions:
            if (name and p.name == name) or (not name and p.default):
                return p
        return None


def discover(runner: Runner) -> ClusterFacts:
    """The cluster as it is (never assumed): version, MpiDefault, accounting, partitions and their nodes.

    Raises:
        ClusterError: scontrol cannot reach slurmctld.
    """
    code, out, err = runner.run(["scontrol", "show", "config"])
    if code != 0:
        raise ClusterError(f"`scontrol show config` failed (exit {code}): {err.strip()[-300:]}; is slurmctld up and "
                           "SLURM_CONF right?")
    cfg = parse_scontrol_config(out)
    version = cfg.get("SLURM_VERSION", "")
    parts: list[Partition] = []
    code, out, _ = runner.run(["sinfo", "--json"])
    if code == 0:
        try:
            parts = parse_sinfo_json(out)
        except (json.JSONDecodeError, AttributeError, TypeError):
            parts = []
    code, text, _ = runner.run(["sinfo", "-h", "-N", "-o", "%P %N"])
    by_text = parse_sinfo_text(text) if code == 0 else []
    default = next((p.name for p in by_text if p.default), None)
    if not parts:
        parts = by_text
    parts = [dataclasses.replace(p, default=p.name == default) for p in parts]
    code, out, err = runner.run(["srun", "--mpi=list"])
    plugins = parse_mpi_list(out + "\n" + err) if code == 0 else None
    return ClusterFacts(version, cfg.get("MpiDefault", ""), tuple(parts),
                        cfg.get("AccountingStorageType", "accounting_storage/none") != "accounting_storage/none",
                        plugins or None)


def check_request(req: SlurmRequest, facts: ClusterFacts) -> None:
    """What the cluster cannot run, in one line each, before sbatch.

    Raises:
        SpecError: the partition does not exist (or none is the default), the job needs more nodes than it has,
            or the ranks' direct launch (``srun --mpi=pmix``) needs a PMIx plugin the cluster's srun lacks.
    """
    plugins = facts.mpi_plugins
    if req.launch == "srun" and plugins is not None and not any(p.startswith("pmix") for p in plugins):
        raise SpecError(f"target.slurm.launch is 'srun' (the ranks start with srun --mpi=pmix), but this cluster's "
                        f"srun offers no pmix (srun --mpi=list: {', '.join(plugins)}; MpiDefault="
                        f"{facts.mpi_default or 'unset'}); set target.slurm.launch: mpirun (Open MPI starts the "
                        "ranks inside the allocation), or ask the cluster's admins for Slurm's PMIx plugin")
    names = [p.name for p in facts.partitions]
    part = facts.partition(req.partition)
    if part is None and req.partition:
        raise SpecError(f"target.slurm.partition: the cluster has no partition {req.partition!r}; "
                        f"its partitions are {', '.join(names) or '(none)'}")
    if part is None:
        raise SpecError("target.slurm.partition is not set and the cluster has no default partition; set it to one of "
                        f"{', '.join(names) or '(none)'}")
    if part.nodes and req.nodes > len(part.nodes):
        raise SpecError(f"resources.hosts: the job needs {req.nodes} nodes, but partition {part.name!r} has "
                        f"{len(part.nodes)} ({','.join(part.nodes)}); lower resources.hosts or choose a larger partition")


def sbatch_error(stderr: str, req: SlurmRequest) -> SpecError | ClusterError:
    """sbatch's refusal as one line naming the field to fix."""
    text = " ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())[-400:]
    low = text.lower()
    if "account" in low:
        return SpecError(f"target.slurm.account: Slurm refused account {req.account!r} ({text}); use an account "
                         "you belong to (sacctmgr show assoc user=$USER)")
    if "partition" in low:
        return SpecError(f"target.slurm.partition: Slurm refused partition {req.partition!r} ({text})")
    if "node configuration is not available" in low or "node count" in low or "more processors" in low:
        return SpecError(f"the job is larger than the cluster can run: {req.nodes} node(s) x {req.tasks_per_node} "
                         f"task(s) ({text}); lower resources.hosts or resources.processes_per_host")
    if "qos" in low:
        return SpecError(f"target.slurm.qos: Slurm refused it ({text})")
    return ClusterError(f"sbatch refused the job: {text}")


def for_cluster(dry: DryRun[SlurmRequest], facts: ClusterFacts) -> DryRun[SlurmRequest]:
    """``dry`` as this cluster takes it: the batch script's GPU line in the form its version knows (``dryrun``
    rendered the current form, and its notes say so); the rest unchanged."""
    n = dry.request.gpus_per_node
    assumed, actual = (f"#SBATCH {shlex.quote(gpu_option(n, v))}\n" for v in (None, facts.version))
    if not n or assumed == actual:
        return dry
    files = tuple((p, t.replace(assumed, actual, 1) if p.endswith("/batch.sh") else t) for p, t in dry.files)
    return dataclasses.replace(dry, files=files)
