"""``kill_self.py SIGNAME RANK [DELAY]``: rank RANK sends itself SIGNAME after DELAY s; the others wait."""
import os
import signal
import sys
import time

sig, bad_rank = signal.Signals[sys.argv[1]], int(sys.argv[2])
delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
rank = int(os.environ.get("RANK", "-1"))
if rank == bad_rank:
    time.sleep(delay)
    os.kill(os.getpid(), sig)
end = time.monotonic() + 120
while time.monotonic() < end:
    time.sleep(0.1)
