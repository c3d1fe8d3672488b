"""``exit_with.py CODE RANK [DELAY]``: rank RANK exits with CODE after DELAY s; the others wait to be stopped.

Waiting ranks poll a short sleep so that they die from mpirun's abort, the
way a real job's peers do when one rank fails.
"""
import os
import sys
import time

code, bad_rank = int(sys.argv[1]), int(sys.argv[2])
delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
rank = int(os.environ.get("RANK", "-1"))
print(f"rank {rank} running", flush=True)
if rank == bad_rank:
    time.sleep(delay)
    sys.exit(code)
end = time.monotonic() + 120
while time.monotonic() < end:
    time.sleep(0.1)
sys.exit(0)
