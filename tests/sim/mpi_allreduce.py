"""Rank program for the sim tests: rank 0 prints "rank host allreduce(rank + 1)" for every rank.

Gathered to rank 0 because mpirun interleaves the output of ranks that print at once.
"""
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
rows = comm.gather((comm.Get_rank(), socket.gethostname(), total), root=0)
if comm.Get_rank() == 0:
    for rank, host, value in rows:
        print(rank, host, value, flush=True)
