"""What Slurm reports, read into values: squeue/sacct JSON of every version (and sacct's text), sinfo, scontrol.

Place in the data flow: the Slurm target (target.py) asks through its runner (runner.py) and reads the
answers here; ``query`` is the one question it asks of a job (squeue while Slurm lists it, sacct after).
The JSON samples in tests/targets/slurm_json/ pin each version's shape (a string ``job_state`` on 22.05,
a list from 23.11).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...errors import ClusterError
from ...records import JobState
from .runner import Runner


# --- Slurm's own words -> ours -------------------------------------------------------------------------

#: Slurm job states (squeue/sacct, every version) -> JobState.  Anything else is kept as text and read as running.
STATE_MAP = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "SUSPENDED": JobState.RUNNING, "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING, "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "CANCELLED": JobState.CANCELLED, "REVOKED": JobState.CANCELLED,
    "FAILED": JobState.FAILED, "TIMEOUT": JobState.FAILED, "NODE_FAIL": JobState.FAILED,
    "PREEMPTED": JobState.FAILED, "BOOT_FAIL": JobState.FAILED, "DEADLINE": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED, "SPECIAL_EXIT": JobState.FAILED,
}
ENDED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it (any version's JSON, or sacct's text)."""

    job_id: str
    name: str
    state: str                      # Slurm's word, upper case ("RUNNING"); "" when it gave none
    exit_code: int | None = None    # Slurm's view (the batch script's code): not the job's result
    signal: int | None = None
    nodes: str = ""
    reason: str = ""
    restarts: int = 0

    @property
    def job_state(self) -> JobState:
        return STATE_MAP.get(self.state, JobState.RUNNING)

    @property
    def known_state(self) -> bool:
        return self.state in STATE_MAP


def _state_word(value: Any) -> str:
    """``job_state``: a string (22.05), a list (23.11+: ``["RUNNING", "COMPLETING"]``), or a dict ({"current": [...]}, sacct)."""
    if isinstance(value, dict):
        value = value.get("current", value.get("state", ""))
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").split()[0].upper() if str(value or "").strip() else ""


def _number(value: Any) -> int | None:
    """A Slurm number: 3, "3", or 23.11+'s {"set": true, "infinite": false, "number": 3}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _exit_of(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from an ``exit_code`` field: an int (22.05 squeue), or {"status":..., "return_code":...,
    "signal": {"signal_id":...}} (sacct, 23.11+)."""
    if isinstance(value, dict):
        code = _number(value.get("return_code"))
        sig = value.get("signal")
        # 22.05: {"signal_id": 15}; 23.11+: {"id": {"set": true, "number": 15}, "name": "TERM"}
        sig = _number(sig.get("signal_id", sig.get("id")) if isinstance(sig, dict) else sig)
        return code, sig or None
    n = _number(value)
    if n is None:
        return None, None
    # squeue's 22.05 integer is a wait status: code << 8 | signal.
    return (n >> 8, (n & 0x7F) or None) if n > 255 else (n, None)


def parse_jobs_json(text: str) -> list[SlurmJob]:
    """``squeue --json`` or ``sacct --json`` of any version: every job it lists; fields it lacks stay empty.

    A foreign job (another user's, odd names, unknown states) never raises; only text that is not JSON does.

    Raises:
        ClusterError: ``text`` is not the JSON of squeue/sacct.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(f"Slurm gave no JSON ({exc}; it printed {text[:200]!r}); is it older than 21.08? "
                           "the text fallback is used instead") from exc
    jobs = data.get("jobs") if isinstance(data, dict) else None
    out = []
    for j in jobs if isinstance(jobs, list) else []:
        if not isinstance(j, dict):
            continue
        job_id = _number(j.get("job_id"))
        if job_id is None:
            continue
        state = j.get("job_state", j.get("state"))
        code, sig = _exit_of(j.get("exit_code"))
        nodes = j.get("nodes", "")
        out.append(SlurmJob(str(job_id), str(j.get("name", "")), _state_word(state), code, sig,
                            nodes if isinstance(nodes, str) else "",
                            str(j.get("state_reason", j.get("state", {}).get("reason", "")
                                      if isinstance(j.get("state"), dict) else "") or ""),
                            _number(j.get("restart_cnt", j.get("restarts"))) or 0))
    return out


def parse_sacct_text(text: str) -> list[SlurmJob]:
    """``sacct -X -n -P -o JobID,JobName,State,ExitCode,NodeList`` (every version, and clusters where --json fails)."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0].split("_")[0].isdigit():
            continue
        code, _, sig = parts[3].partition(":")
        out.append(SlurmJob(parts[0], parts[1], _state_word(parts[2]), int(code) if code.isdigit() else None,
                            int(sig) if sig.isdigit() and int(sig) else None, parts[4] if len(parts) > 4 else ""))
    return out


def parse_scontrol_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = value`` lines -> dict (the version line included as SLURM_VERSION)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_mpi_list(text: str) -> tuple[str, ...]:
    """``srun --mpi=list``: the MPI plugin types this cluster's srun offers (``pmix``, ``pmix_v4``, ``pmi2``, ...).

    22.05 and later print ``MPI plugin types are...``, one type a line, then ``specific pmix plugin versions
    available: pmix_v4``; older ones put ``srun: `` before each line.
    """
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("srun:"):
            line = line[len("srun:"):].strip()
        _, sep, rest = line.partition("available:")
        if sep:
            out += [v.strip() for v in rest.replace(",", " ").split() if v.strip()]
        elif line and " " not in line and not line.endswith("..."):
            out.append(line)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    default: bool = False
    state: str = "UP"


def parse_sinfo_json(text: str) -> list[Partition]:
    """``sinfo --json``: one entry per node and partition (22.05: ``nodes`` with ``partitions``; 23.11+:
    ``sinfo`` with ``partition.name`` and ``nodes.nodes``)."""
    data = json.loads(text)
    parts: dict[str, set[str]] = {}
    for n in data.get("nodes") or []:
        for p in n.get("partitions") or []:
            parts.setdefault(p, set()).add(n.get("name") or n.get("hostname", ""))
    for entry in data.get("sinfo") or []:
        p = (entry.get("partition") or {}).get("name")
        names = (entry.get("nodes") or {}).get("nodes") or []
        if p:
            parts.setdefault(p, set()).update(names)
    return [Partition(p, tuple(sorted(n for n in ns if n))) for p, ns in sorted(parts.items())]


def parse_sinfo_text(text: str) -> list[Partition]:
    """``sinfo -h -N -o '%P %N'``: one line per node and partition; the default partition ends with ``*``."""
    parts: dict[str, list[str]] = {}
    default = ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 2:
            continue
        name, node = fields
        if name.endswith("*"):
            name = default = name[:-1]
        parts.setdefault(name, []).append(node)
    return [Partition(p, tuple(sorted(set(ns))), default=p == default) for p, ns in sorted(parts.items())]



#: what squeue and sacct print for a job id they do not know: Slurm was reached, and the job is not there.
_NOT_KNOWN = ("invalid job id", "accounting storage is disabled")


def query(runner: Runner, job_id: str) -> SlurmJob | None:
    """The job as Slurm has it now: squeue --json, then sacct --json, then sacct's text; None when Slurm answered and
    none knows it.

    Raises:
        ClusterError: none of them reached Slurm (this host's clients have no way to the cluster): a job must never
            look gone because it was asked from the wrong host.
    """
    failed: dict[str, str] = {}
    answered = False
    for tool in ("squeue", "sacct"):  # squeue while the job is known there, sacct after it ended
        code, out, err = runner.run([tool, "--json", "-j", job_id])
        if code == 0:
            answered = True
            try:
                found = [j for j in parse_jobs_json(out) if j.job_id == job_id]
                if found:
                    return found[0]
            except ClusterError:
                pass  # a shape we cannot read: the next source may answer
        elif any(w in err.lower() for w in _NOT_KNOWN):
            answered = True
        else:
            failed.setdefault(tool, " ".join(err.split())[-200:] or f"exit {code}")
    code, out, err = runner.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,JobName,State,ExitCode,NodeList"])
    if code == 0:
        found = [j for j in parse_sacct_text(out) if j.job_id == job_id]
        if found:
            return found[0]
        answered = True
    if not answered and failed:
        raise ClusterError(f"could not ask Slurm about job {job_id} from this host: "
                           + "; ".join(f"{t}: {e}" for t, e in failed.items()))
    return None
