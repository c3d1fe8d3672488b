"""Checkpoints: the trainer's complete state <-> one file per save in the output directory.

A checkpoint holds model, optimizer, LR scheduler, grad scaler, sampler position (epoch, batch),
every rank's RNG states, the step, and the resolved config.  ``save_checkpoint`` writes
``model_<step>.pth`` through a temporary file + ``os.replace`` (a crash mid-write leaves the previous
checkpoint intact and no half file under a real name), then atomically repoints ``last_checkpoint``
and only then deletes checkpoints older than the newest ``keep``.  ``--resume auto`` follows
``last_checkpoint``.
"""
from __future__ import annotations

import logging
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import SpecError

log = logging.getLogger(__name__)

POINTER = "last_checkpoint"


class CheckpointError(SpecError):
    """A checkpoint to resume from is missing, unreadable or incomplete."""


REQUIRED_KEYS = ("model", "optimizer", "scheduler", "sampler", "rng", "step", "config")


def _atomic_write(path: Path, write) -> None:
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


def save_checkpoint(output_dir: str | os.PathLike, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` as ``model_<step>.pth``, repoint ``last_checkpoint``, prune old ones."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"model_{int(state['step']):07d}.pth"
    _atomic_write(path, lambda f: torch.save(state, f))
    _atomic_write(out / POINTER, lambda f: f.write(path.name.encode() + b"\n"))
    olds = sorted(p for p in out.glob("model_*.pth") if p != path)
    for p in olds[:max(0, len(olds) - (keep - 1))]:
        p.unlink(missing_ok=True)
    return path


def find_last(output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint ``last_checkpoint`` names, or None when there is none yet."""
    ptr = Path(output_dir) / POINTER
    if not ptr.is_file():
        return None
    name = ptr.read_text().strip()
    path = Path(output_dir) / name
    if not path.is_file():
        raise CheckpointError(f"{ptr} names {name}, which does not exist; expected a checkpoint in {output_dir} "
                              "(delete the pointer file to start over, or pass --resume PATH)")
    return path


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist; expected a model_*.pth written by this trainer")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch.load raises assorted types for truncated or foreign files
        raise CheckpointError(f"checkpoint {path} could not be read ({exc}); it is corrupt: "
                              "resume from an older model_*.pth") from exc
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}; expected a full trainer checkpoint")
    return state


def capture_rng() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
