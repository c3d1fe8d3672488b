"""Small pieces both roles share: the failure file and the result line."""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def failure_path(opt_ml: Path) -> Path:
    return Path(opt_ml) / "output" / "failure"


def write_failure(opt_ml: Path, text: str) -> Path | None:
    """Write ``<opt_ml>/output/failure`` atomically (SageMaker shows its first 1024 chars as FailureReason)."""
    path = failure_path(opt_ml)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".failure.")
        with os.fdopen(fd, "w") as f:
            f.write(text.rstrip("\n") + "\n")
        os.replace(tmp, path)
        return path
    except OSError as exc:
        log.warning("could not write the failure file %s: %s", path, exc)
        return None
