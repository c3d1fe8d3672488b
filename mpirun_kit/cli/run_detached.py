"""`mpirun_kit run-detached ID` (internal): the detached copy of `submit`, started by `submit --detach`.

Argument parsing only: the job service (service/runner.py ``JobService.run_recorded``) runs the request
`submit` recorded in the job's run directory, in this session of its own, and writes the job's end to
its record.
"""
from __future__ import annotations

from ..errors import ExitCode
from .main import add_command, exit_codes


def _supervise(args) -> int:
    from .common_flags import service_of

    return service_of(args).run_recorded(args.job_id).exit_code


def register(subparsers) -> None:
    from .common_flags import add_state_dir_arg

    p = add_command(
        subparsers, "run-detached", help="(internal) run a recorded job to its end; started by `submit --detach`",
        description="Run the job recorded as ID (its run directory's request.json) to its end and record how it "
                    "ended. `submit --detach` starts it in a session of its own, output to the run directory; "
                    "not for direct use.",
        examples=["mpirun_kit run-detached hello-3fa9c1 --state-dir ~/.local/state/mpirun_kit"],
        codes=exit_codes(ExitCode.BAD_INPUT, ExitCode.LAUNCH_FAILED, job=True,
                         notes={0: "the job succeeded", 64: "no such job record"}))
    p.add_argument("job_id", metavar="ID", help="the job id `submit --detach` recorded")
    add_state_dir_arg(p)
    p.set_defaults(func=_supervise)
