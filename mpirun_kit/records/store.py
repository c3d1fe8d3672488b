"""The job record store: SQLite (standard library) under the state directory, one row per submission.

Place in the data flow: see the package docstring.  A record is made before a target runs
anything (``RecordStore.create``: a fresh job id and a fresh run directory, both refused if they
exist, so no two runs ever share one), updated by the process that supervises the job (its pid
and start time, so a reused pid is never taken for it; ``running``; the result), and read by
the lifecycle verbs.  Several processes use the store at once (two submits, a detached
supervisor, a ``cancel``): every write is one short transaction and SQLite's own lock
serialises them (``timeout`` below bounds the wait for it).

Another user of the host must not be able to change a job (issue #39): the state directory and ``jobs.db``
are refused when another user owns or can write them, and each run directory is made 0700 and refused,
before anything is written in it, when it or a directory above it could be swapped (core/private.py).  A
record's supervisor is taken to be the process it names only when that process proves it is
(``supervisor_problem``: start time, owner and command line), so a record can never make ``cancel`` signal
a stranger.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import pwd
import re
import secrets
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.private import make_private, make_private_dir, owner
from ..errors import NoSuchJobError, SpecError

#: seconds a write waits for another process's transaction (SQLite's busy timeout).
LOCK_WAIT_S = 30.0
DB_FILE = "jobs.db"
#: what a run directory holds (names relative to it); every target writes the same names.
RUN_FILES = {
    "spec": "spec.json",          # the resolved spec: the compiled LaunchSpec the ranks get
    "plan": "plan.txt",           # the request as `submit --dry-run` prints it (secrets shown as ***)
    "request": "request.json",    # the request as sent (0600: it may hold secrets); the detached supervisor reads it
    "output": "output.log",       # what the ranks printed, each line behind `[rank host]`
    "log": "submit.log",          # the supervisor's own lines (a detached job's stderr)
    "failure": "output/failure",  # the launcher's failure report, root cause first
    "timeline": "output/timeline.json",
    "outcome": "outcome.json",    # the Outcome, wrapping the JobResult (`submit --json`'s last line)
    "result": "result.json",      # the outcome's name before outcome.json: read for records made before, never written
}


class JobState(str, enum.Enum):
    """One state vocabulary for every target (torchx's AppState, cut to what a user acts on).

    ``lost``: the record says the job was running, but the process that supervised it is gone
    and left no result (killed with SIGKILL, the machine rebooted); nothing of it can be followed.
    """

    PENDING = "pending"        # recorded, not started yet (or queued by the platform)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"    # stopped by `cancel`, Ctrl-C or a signal to submit
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST)


@dataclass(frozen=True)
class JobRecord:
    """One submission as stored.  ``native``: the target's own name for the job (the SageMaker training
    job name, the Slurm job id, the sim cluster name, the ssh run id); ``details``: what else that target
    needs to find it again (JSON-ready: a region, hosts)."""

    job_id: str
    name: str                           # the spec's job name
    target: str
    state: JobState = JobState.PENDING
    spec: str | None = None             # the spec file, absolute
    run_dir: str | None = None
    native: str | None = None
    details: dict = field(default_factory=dict)
    supervisor_pid: int | None = None   # the process that supervises the job (submit, or its detached copy)
    supervisor_start: int | None = None  # that process's start time (process_start), so a reused pid is not it
    detached: bool = False
    cancel_requested: bool = False
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    source: str | None = None
    reason: str | None = None
    root_cause: dict | None = None

    def path(self, what: str) -> Path:
        """The run directory's file ``what`` (a key of RUN_FILES)."""
        if self.run_dir is None:
            raise SpecError(f"job {self.job_id} has no run directory (target {self.target})")
        return Path(self.run_dir) / RUN_FILES[what]

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "state": self.state.value}


_COLUMNS = tuple(f.name for f in dataclasses.fields(JobRecord))
_JSON_COLUMNS = ("details", "root_cause")
_SLUG = re.compile(r"[^a-z0-9-]+")


#: the variable that overrides the store's directory (the CLI reads it; `--state-dir` wins over it).
STATE_DIR_VAR = "MPIRUN_KIT_STATE_DIR"


def default_state_dir(environ: Mapping[str, str]) -> Path:
    """Where the store lives: ``$MPIRUN_KIT_STATE_DIR``, else ``$XDG_STATE_HOME/mpirun_kit``, else
    ``$HOME/.local/state/mpirun_kit`` (the XDG base directory rule).  ``environ`` is the CLI's to pass."""
    if environ.get(STATE_DIR_VAR):
        return Path(environ[STATE_DIR_VAR])
    home = environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir
    return Path(environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")) / "mpirun_kit"


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/PID/stat field 22); None when
    there is no such process.  A pid and its start time name one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    if fields and fields[0] == "Z":
        return None   # exited, not yet reaped: it supervises nothing any more
    return int(fields[19]) if len(fields) > 19 else None


def process_uid(pid: int) -> int | None:
    """The real uid of process ``pid`` (/proc/PID/status), None when there is no such process."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_argv(pid: int) -> list[str]:
    """The command line of process ``pid`` ([] when there is none or it cannot be read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def is_mpirun_kit(argv: list[str]) -> bool:
    """The command line is mpirun_kit's own (``mpirun_kit ...`` or ``python -m mpirun_kit.cli.main ...``): a
    job's supervisor is always one (submit, or its detached copy run-detached)."""
    return any(a == "mpirun_kit" or a.startswith("mpirun_kit.") or os.path.basename(a) == "mpirun_kit"
               for a in argv[:4])


#: ``supervisor_problem``'s first value: the process is gone, or is another user's, or is no supervisor.
GONE, OTHER_USER, NOT_SUPERVISOR = "gone", "other-user", "not-supervisor"
#: the record's ``details`` key for the sha256 of its supervisor's command line, kept when the supervisor records
#: itself (``RecordStore.update``): a program of the user's that supervises a job through the Python API is one.
SUPERVISOR_CMD = "supervisor_cmd_sha256"


def command_digest(argv: list[str]) -> str:
    return hashlib.sha256("\0".join(argv).encode()).hexdigest()


def supervisor_problem(pid: int | None, start: int | None, cmd: str | None = None) -> tuple[str, str] | None:
    """None when process ``pid`` is the job's live supervisor: the start time recorded (a reused pid is not
    it), this user's process, and the command line it recorded (``cmd``, its SUPERVISOR_CMD), or without one
    an mpirun_kit command; else (GONE | OTHER_USER | NOT_SUPERVISOR, why).  ``cancel`` signals only a process
    that passes (a record could name any pid of the host)."""
    if pid is None or start is None or process_start(pid) != start:
        return GONE, f"its supervisor (pid {pid}) is gone"
    uid = process_uid(pid)
    if uid is None:
        return GONE, f"its supervisor (pid {pid}) is gone"
    if uid != os.geteuid():
        return OTHER_USER, (f"its supervisor (pid {pid}) runs as {owner(uid)}, not as you ({owner(os.geteuid())}): "
                            f"only that user can cancel it")
    if not (command_digest(process_argv(pid)) == cmd if cmd else is_mpirun_kit(process_argv(pid))):
        return NOT_SUPERVISOR, (f"the record names pid {pid}, which is not an mpirun_kit process "
                                f"({' '.join(process_argv(pid))[:80]!r}): its supervisor is gone")
    return None


def make_job_id(name: str) -> str:
    """``NAME-xxxxxx``: the spec's name (lowercase letters, digits, hyphens; at most 40) and 6 random hex digits."""
    slug = _SLUG.sub("-", name.lower()).strip("-")[:40] or "job"
    return f"{slug}-{secrets.token_hex(3)}"


class RecordStore:
    """The store in ``state_dir`` (made on first use, 0700: records name this user's paths and jobs)."""

    def __init__(self, state_dir: str | os.PathLike):
        self.dir = Path(state_dir)
        self.db = self.dir / DB_FILE
        self._checked = False

    def _check(self) -> None:
        """The state directory made (0700) and, with ``jobs.db``, refused when another user owns or can write it:
        whoever can change the records decides what ``cancel`` signals and what ``run-detached`` runs."""
        why = make_private(self.dir, exist_ok=True)
        if not why:
            try:
                st = os.lstat(self.db)
            except FileNotFoundError:
                st = None
            if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022):
                why = (f"{self.db} is {'a symbolic link' if stat.S_ISLNK(st.st_mode) else 'a file'} of "
                       f"{owner(st.st_uid)} with mode {stat.S_IMODE(st.st_mode):o}")
        if why:
            raise SpecError(f"job records: {self.dir} is refused: {why}, so another user could change your job "
                            f"records; set --state-dir or MPIRUN_KIT_STATE_DIR to a directory of your own that only "
                            f"you can write (the default is ~/.local/state/mpirun_kit)")
        self._checked = True

    def _connect(self) -> sqlite3.Connection:
        try:
            if not self._checked:
                self._check()
            con = sqlite3.connect(self.db, timeout=LOCK_WAIT_S, isolation_level=None)
            con.execute("CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, "
                        + ", ".join(c for c in _COLUMNS if c != "job_id") + ")")  # no type: values keep theirs
        except (OSError, sqlite3.Error) as exc:
            raise SpecError(f"job records: cannot open {self.db} ({exc}); set --state-dir or MPIRUN_KIT_STATE_DIR "
                            "to a writable directory") from exc
        con.row_factory = sqlite3.Row
        return con

    # -- writes -------------------------------------------------------------------------------------

    def create(self, name: str, target: str, *, spec: str | None, runs_root: str | os.PathLike | None,
               native: str | None = None, details: dict | None = None, now: float | None = None) -> JobRecord:
        """A new record with a fresh job id and, under ``runs_root`` (None: no run directory, e.g. a
        platform job), a fresh run directory ``runs_root/ID``; neither is ever reused."""
        for _ in range(100):
            job_id = make_job_id(name)
            run_dir = None
            if runs_root is not None:
                run_dir = Path(os.path.abspath(runs_root)) / job_id
                try:
                    # 0700, refused before anything is written when another user could swap it (issue #39)
                    make_private_dir(run_dir, "run directory")
                except FileExistsError:
                    continue   # a directory left by another store, or a collision: never reuse it
            rec = JobRecord(job_id, name, target, spec=spec, run_dir=str(run_dir) if run_dir else None,
                            native=native, details=dict(details or {}),
                            created_at=time.time() if now is None else now)
            try:
                with self._connect() as con:
                    con.execute(f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                                [_encode(c, getattr(rec, c)) for c in _COLUMNS])
            except sqlite3.IntegrityError:
                if run_dir is not None:
                    run_dir.rmdir()
                continue
            return rec
        raise SpecError(f"job records: could not make a fresh job id for {name!r} in {self.db}")  # pragma: no cover

    def update(self, job_id: str, **fields: Any) -> JobRecord:
        """Set ``fields`` of the record ``job_id``; the record as stored after."""
        bad = set(fields) - set(_COLUMNS) - {"job_id"}
        if bad:
            raise TypeError(f"unknown record fields {sorted(bad)}")
        if fields.get("supervisor_pid") == os.getpid():   # the supervisor records itself: its command line too
            details = fields.get("details", self.get(job_id).details)
            fields["details"] = {**details, SUPERVISOR_CMD: command_digest(process_argv(os.getpid()))}
        if fields:
            with self._connect() as con:
                con.execute(f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in fields)} WHERE job_id = ?",
                            [_encode(c, v) for c, v in fields.items()] + [job_id])
        return self.get(job_id)

    def finish(self, job_id: str, *, state: JobState, exit_code: int | None, source: str | None = None,
               reason: str | None = None, root_cause: dict | None = None, now: float | None = None) -> JobRecord:
        """The job ended: its state and result, unless an earlier writer already ended it."""
        rec = self.get(job_id)
        if rec.state.terminal and rec.state != JobState.LOST:
            return rec
        return self.update(job_id, state=state, exit_code=exit_code, source=source, reason=reason,
                           root_cause=root_cause, ended_at=time.time() if now is None else now)

    # -- reads --------------------------------------------------------------------------------------

    def get(self, ref: str) -> JobRecord:
        """The record named by ``ref``: its job id, its target's own name (a SageMaker training job name),
        or a prefix of one job id that no other shares.

        Raises:
            NoSuchJobError: no record (a SpecError);
            SpecError: a prefix several share (names them).
        """
        with self._connect() as con:
            rows = con.execute("SELECT * FROM jobs WHERE job_id = ? OR native = ? ORDER BY created_at DESC",
                               (ref, ref)).fetchall()
            if not rows:
                like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                rows = con.execute("SELECT * FROM jobs WHERE job_id LIKE ? ESCAPE '\\' ORDER BY created_at DESC",
                                   (like,)).fetchall()
        if not rows:
            raise NoSuchJobError(f"no job {ref!r} in the job records ({self.db}); `mpirun_kit jobs` lists the jobs "
                                 "recorded there (give --state-dir if they were submitted with another)", ref,
                                 str(self.db))
        if len(rows) > 1 and rows[0]["job_id"] != ref and rows[0]["native"] != ref:
            raise SpecError(f"job {ref!r} is ambiguous: it starts {len(rows)} job ids "
                            f"({', '.join(r['job_id'] for r in rows[:5])}); give more of it")
        return _decode(rows[0])

    def list(self, *, states: Iterable[JobState] | None = None, spec: str | None = None,
             target: str | None = None, limit: int | None = None) -> list[JobRecord]:
        """Records, newest first, filtered by state, spec (its path or its job name) and target."""
        where, args = [], []
        states = [JobState(s).value for s in states] if states else None
        if states:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args += states
        if spec:
            where.append("(spec = ? OR name = ?)")
            args += [str(Path(spec).resolve()) if os.sep in spec or spec.endswith((".yaml", ".yml")) else spec, spec]
        if target:
            where.append("target = ?")
            args.append(target)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._connect() as con:
            return [_decode(r) for r in con.execute(sql, args).fetchall()]


def _encode(column: str, value: Any) -> Any:
    if column in _JSON_COLUMNS:
        return None if value is None else json.dumps(value, sort_keys=True)
    if isinstance(value, JobState):
        return value.value
    if isinstance(value, bool):
        return int(value)
    return value


def _decode(row: sqlite3.Row) -> JobRecord:
    kw: dict[str, Any] = {}
    for c in _COLUMNS:
        v = row[c]
        if c in _JSON_COLUMNS:
            v = json.loads(v) if v else ({} if c == "details" else None)
        elif c == "state":
            v = JobState(v)
        elif c in ("detached", "cancel_requested"):
            v = bool(int(v)) if v is not None else False
        elif c in ("supervisor_pid", "supervisor_start", "exit_code") and v is not None:
            v = int(v)
        elif c in ("created_at", "started_at", "ended_at") and v is not None:
            v = float(v)
        kw[c] = v
    return JobRecord(**kw)
