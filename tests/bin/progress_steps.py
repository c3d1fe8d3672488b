"""Rank program for the hang tests: allreduce steps that report progress (mpirun_kit.progress).

    progress_steps.py MODE STEPS MARKDIR
    hang  every rank reports steps; rank 3 stops before the allreduce of step 3 and sleeps forever
          (it writes MARKDIR/stuck.3 first), so every other rank waits inside that allreduce;
    slow  no collectives: rank 1 takes 1.5 s per step, the others 0.1 s (slow but advancing);
    none  the same allreduce steps as "hang" without rank 3 stopping, and no progress reported.
"""
import sys
import time
from pathlib import Path

from mpi4py import MPI

from mpirun_kit import progress

mode, steps, marks = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
comm = MPI.COMM_WORLD


def stuck_before_allreduce():
    (marks / f"stuck.{comm.rank}").write_text("")
    while True:
        time.sleep(3600)


def allreduce_step(i):
    return comm.allreduce(i)


for i in range(steps):
    if mode == "slow":
        time.sleep(1.5 if comm.rank == 1 else 0.1)
    else:
        if mode == "hang" and comm.rank == 3 and i == 3:
            stuck_before_allreduce()
        allreduce_step(i)
        time.sleep(0.3)
    if mode != "none":
        progress.step(i)
