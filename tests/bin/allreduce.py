"""Every rank contributes rank+1; rank 0 prints the allreduce sum, the expected sum and every rank's host."""
import socket
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1, op=MPI.SUM)
hosts = comm.gather(socket.gethostname(), root=0)
if comm.rank == 0:
    n = comm.size
    print(f"ALLREDUCE sum={total} expected={n * (n + 1) // 2} size={n} hosts={','.join(hosts)}", flush=True)
sys.exit(0 if total == comm.size * (comm.size + 1) // 2 else 1)
