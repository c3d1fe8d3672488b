"""`mpirun_kit timeline JOB|DIR|FILE`: a job's launch timeline read back: critical path, summary, Gantt chart.

Argument parsing and printing only; reading, checking and rendering are observe/timeline.py.  The
timeline is found from a job id (its record's run directory), a run directory, or the file itself.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ExitCode, SpecError


def _timeline(args) -> int:
    from ..observe import timeline

    data = timeline.load(timeline_file(args))
    if args.json:
        s = timeline.summary(data)
        print(json.dumps({"critical_path": [{"what": p.what, "t": p.t, "took_s": p.took}
                                            for p in timeline.critical_path(data)], **s}, indent=1))
    else:
        print(timeline.render_text(data))
    if args.png:
        out = timeline.render_png(data, Path(args.png))
        if not args.json:
            print(f"chart written to {out}")
    return 0


def timeline_file(args) -> Path:
    """The timeline.json named by ``args.file``: the file, a directory holding it (a run directory: in its
    ``output/``), or a job id from the records (its run directory's ``output/timeline.json``)."""
    from ..records import RUN_FILES

    given = Path(args.file)
    if given.is_dir():
        for candidate in (given / RUN_FILES["timeline"], given / "timeline.json"):
            if candidate.is_file():
                return candidate
        raise SpecError(f"{given}: no timeline.json in this directory or its output/; give a job id, a run "
                        "directory or the file itself (the launcher writes it when the job ends)")
    if given.exists() or "/" in args.file or args.file.endswith(".json"):
        return given
    from .common_flags import store_of

    try:
        rec = store_of(args).get(args.file)
    except SpecError as exc:
        raise SpecError(f"{args.file}: no such file, and {exc}") from None
    path = rec.path("timeline")
    if not path.is_file():
        raise SpecError(f"job {rec.job_id} ({rec.state.value}) has no timeline yet ({path}); the launcher writes "
                        "it when the job ends")
    return path


def register(subparsers) -> None:
    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "timeline", help="show a job's launch timeline: critical path, per-host CPU, Gantt chart",
        description="Read the timeline.json a job wrote to <opt_ml>/output/ (give its job id, its run directory "
                    "or the file) and print the chain of waits that "
                    "decided how long the launch and shutdown took (the slowest worker, the last rank to "
                    "start), each host's entrypoint CPU time during start-up, and a one-line summary. "
                    "--png renders a per-host Gantt chart (needs the extra mpirun_kit[timeline]: matplotlib).",
        examples=["mpirun_kit timeline hello-3fa9c1", "mpirun_kit timeline runs/hello/hello-3fa9c1",
                  "mpirun_kit timeline /opt/ml/output/timeline.json",
                  "mpirun_kit timeline timeline.json --png timeline.png",
                  "mpirun_kit timeline timeline.json --json"],
        codes=exit_codes(ExitCode.BAD_INPUT, notes={
            ExitCode.BAD_INPUT: "no such job or file, the file is not a timeline, or matplotlib is missing for --png"}))
    p.add_argument("file", metavar="JOB|DIR|FILE", help="a job id (`mpirun_kit jobs`), a run directory, or a "
                                                        "timeline.json written by a job")
    p.add_argument("--png", metavar="OUT", help="also render a per-host Gantt chart to this PNG file")
    p.add_argument("--json", action="store_true", help="the critical path and summary as one JSON object")
    from .common_flags import add_state_dir_arg

    add_state_dir_arg(p)
    p.set_defaults(func=_timeline)
