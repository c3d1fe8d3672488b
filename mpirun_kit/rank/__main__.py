"""``python -m mpirun_kit.rank -- PROGRAM [ARGS...]``: the per-rank wrapper (wrapper.py)."""
import sys

from .wrapper import main

sys.exit(main())
