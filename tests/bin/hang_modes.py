"""MPI programs that hang or fail the ways issue 29 names; none reports progress, none prints while it runs.

    hang_modes.py MODE RANK MARKDIR [STEPS]
    exit3     rank RANK calls sys.exit(3) while the others wait in a barrier (before issue 40 it then sat in
              MPI_Finalize, run by mpi4py's exit hook, and never exited on its own; now the rank wrapper's
              fail-fast hook aborts the job with 3);
    raise3    the same with ``raise SystemExit(3)``, which the fail-fast hook does not see: the rank sits in
              MPI_Finalize and only the hang monitor's exit check ends the job;
    sleep     rank RANK sleeps, in no collective, while the others wait in an allreduce;
    mismatch  rank RANK waits in a barrier while the others wait in an allreduce;
    slow      STEPS steps of an allreduce, then a sleep (1.5 s on rank RANK, 0.1 s on the others): slow
              but advancing, and silent: the only change seen from outside is the loop's counter.

Each rank writes MARKDIR/stuck.<rank> just before it starts to wait (hang modes) or MARKDIR/done.<rank> at
the end (slow), so a test knows when the hang began.
"""
import sys
import time
from pathlib import Path

from mpi4py import MPI


def mark(name: str) -> None:
    (marks / f"{name}.{comm.rank}").write_text("")


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def slow(steps: int) -> None:
    for i in range(steps):
        comm.allreduce(i)
        time.sleep(1.5 if comm.rank == odd else 0.1)
    mark("done")


mode, odd, marks = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
comm = MPI.COMM_WORLD
comm.Barrier()                      # every rank is up before any hangs
if mode == "slow":
    slow(int(sys.argv[4]))
elif mode in ("exit3", "raise3"):
    mark("stuck")
    if comm.rank == odd:
        if mode == "raise3":
            raise SystemExit(3)
        sys.exit(3)
    comm.Barrier()
elif mode == "sleep":
    mark("stuck")
    if comm.rank == odd:
        sleep_forever()
    comm.allreduce(1)
elif mode == "mismatch":
    mark("stuck")
    if comm.rank == odd:
        comm.Barrier()
    else:
        comm.allreduce(1)
else:
    sys.exit(f"unknown mode {mode!r}")
