"""`mpirun_kit timeline FILE`: a job's launch timeline read back: critical path, summary, Gantt chart.

Argument parsing and printing only; reading, checking and rendering are observe/timeline.py.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ExitCode


def _timeline(args) -> int:
    from ..observe import timeline

    data = timeline.load(Path(args.file))
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


def register(subparsers) -> None:
    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "timeline", help="show a job's launch timeline: critical path, per-host CPU, Gantt chart",
        description="Read the timeline.json a job wrote to <opt_ml>/output/ and print the chain of waits that "
                    "decided how long the launch and shutdown took (the slowest worker, the last rank to "
                    "start), each host's entrypoint CPU time during start-up, and a one-line summary. "
                    "--png renders a per-host Gantt chart (needs the extra mpirun_kit[timeline]: matplotlib).",
        examples=["mpirun_kit timeline /opt/ml/output/timeline.json",
                  "mpirun_kit timeline timeline.json --png timeline.png",
                  "mpirun_kit timeline timeline.json --json"],
        codes=exit_codes(ExitCode.BAD_INPUT, notes={
            ExitCode.BAD_INPUT: "the file is not a timeline, or matplotlib is missing for --png"}))
    p.add_argument("file", metavar="FILE", help="a timeline.json written by a job")
    p.add_argument("--png", metavar="OUT", help="also render a per-host Gantt chart to this PNG file")
    p.add_argument("--json", action="store_true", help="the critical path and summary as one JSON object")
    p.set_defaults(func=_timeline)
