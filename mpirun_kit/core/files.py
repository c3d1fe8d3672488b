"""Atomic file writes: a reader sees the old file or the whole new one, never a part.

Every file mpirun_kit writes for someone else to read goes through here: the failure file
SageMaker shows, timeline.json, hang reports, the per-job keys sshd reads, the launch spec a
launcher reads, the published JSON schema, and the Mask R-CNN module's checkpoints, their
pointer, metrics.json and synthetic annotations (a resume or a SageMaker upload must never
read half a file).  The data is fsynced before the rename, so a crash right after leaves the
old file or the new one on disk, not an empty one.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable


def write_atomic(path: str | os.PathLike, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; returns the path (see ``write_atomic_with``)."""
    return write_atomic_with(path, lambda f: f.write(data.encode() if isinstance(data, str) else data), mode)


def write_atomic_with(path: str | os.PathLike, write: Callable[[BinaryIO], Any], mode: int = 0o644) -> Path:
    """Call ``write`` on a temporary binary file beside ``path``, fsync it, rename it over ``path``.

    The temporary file is created 0600 (mkstemp) and only then set to ``mode``, so a
    private file (a key, a secret: ``mode=0o600``) is never readable by others, not even
    between create and chmod.  Missing parent directories are created.

    Raises:
        OSError: the directory cannot be made or written (the temporary file is removed);
        whatever ``write`` raises, likewise.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode != 0o600:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, obj: Any, **dump_kw: Any) -> Path:
    """``obj`` as JSON at ``path``, atomically (``dump_kw`` go to ``json.dumps``)."""
    return write_atomic(path, json.dumps(obj, **dump_kw))
