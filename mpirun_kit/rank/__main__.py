"""``python -m mpirun_kit.rank -- PROGRAM [ARGS...]``: the per-rank wrapper (wrapper.py)."""
import os
import sys

from .wrapper import main

code = main()
# The program's exit is reported and the key gone: nothing is left for the interpreter's own finalization (module
# teardown, ~5 ms of CPU per rank) but to delay mpirun's view of this rank's end, on the shutdown's critical path.
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except (OSError, ValueError):   # closed by the reader: nothing more can reach it
        pass
os._exit(code)
