"""The Mask R-CNN module's one atomic write (checkpoints, metrics.json, synthetic annotations).

The module stays independent of the launcher, so it keeps this private copy instead of
``mpirun_kit.exec.files.write_atomic``: a temporary file beside the target, fsynced, then renamed, so
a reader (a resume, a SageMaker upload) sees the old file or the new one, never half of one.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable


def atomic_write(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Call ``write`` on a temporary binary file beside ``path``, fsync it, rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any, **dump_kw: Any) -> None:
    """``obj`` as JSON at ``path``, atomically (``dump_kw`` go to ``json.dumps``)."""
    data = json.dumps(obj, **dump_kw).encode()
    atomic_write(path, lambda f: f.write(data))
