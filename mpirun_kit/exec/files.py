"""Atomic file writes: a reader sees the old file or the whole new one, never a part.

Every file mpirun_kit writes for someone else to read (the failure file SageMaker
shows, timeline.json, hang reports, the per-job keys sshd reads, the launch spec a
launcher reads, the published JSON schema) goes through ``write_atomic``.  (The
Mask R-CNN module keeps its own for checkpoints, to stay independent of the launcher.)
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename; returns the path.

    The temporary file is created 0600 (mkstemp) and only then set to ``mode``, so a
    private file (a key, a secret: ``mode=0o600``) is never readable by others, not even
    between create and chmod.  Missing parent directories are created.

    Raises:
        OSError: the directory cannot be made or written (the temporary file is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        if mode != 0o600:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
