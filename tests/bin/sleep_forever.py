"""``sleep_forever.py [MARKER_DIR]``: run until SIGTERM; then write MARKER_DIR/sigterm.<rank> and exit 143.

Once running it prints "rank N ready" and, with MARKER_DIR, writes MARKER_DIR/ready.<rank>,
so tests know every rank reached user code.
"""
import os
import signal
import sys
import time

rank = os.environ.get("RANK", "?")
marker_dir = sys.argv[1] if len(sys.argv) > 1 else None


def on_term(signum, frame):
    if marker_dir:
        os.makedirs(marker_dir, exist_ok=True)
        with open(os.path.join(marker_dir, f"sigterm.{rank}"), "w") as f:
            f.write(f"rank {rank} got {signal.Signals(signum).name}\n")
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_term)
if marker_dir:
    os.makedirs(marker_dir, exist_ok=True)
    open(os.path.join(marker_dir, f"ready.{rank}"), "w").close()
print(f"rank {rank} ready", flush=True)
end = time.monotonic() + 300
while time.monotonic() < end:
    time.sleep(0.05)
