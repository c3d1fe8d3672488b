"""Checkpoints: the trainer's complete state <-> one file per save in the output directory.

A checkpoint holds model, optimizer, LR scheduler, grad scaler, sampler position (epoch, batch),
every rank's RNG states, the step, and the resolved config.  ``save_checkpoint`` writes
``model_<step>.pth`` through a temporary file + ``os.replace`` (a crash mid-write leaves the previous
checkpoint intact and no half file under a real name), then atomically repoints ``last_checkpoint``
and fsyncs the directory (so the rename is durable) before deleting checkpoints older than the
newest ``keep``.  ``--resume auto`` follows ``last_checkpoint``.

The output directory is synced from S3 and writable by the job's role, so its files are untrusted
input: ``torch.load(weights_only=True)`` never runs code from a planted pickle (RNG states are
stored as tensors and plain tuples for that reason), the pointer must name a ``model_<step>.pth``
in the directory (an absolute path or ``../`` is refused), and a pointer whose file is missing
falls back to the newest checkpoint that loads.
"""
from __future__ import annotations

import logging
import os
import pickle
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import SpecError
from ..core.files import write_atomic_with

log = logging.getLogger(__name__)

POINTER = "last_checkpoint"


class CheckpointError(SpecError):
    """A checkpoint to resume from is missing, unreadable or incomplete."""


REQUIRED_KEYS = ("model", "optimizer", "scheduler", "sampler", "rng", "step", "config")
#: the only names ``save_checkpoint`` writes, and so the only names the pointer may hold.
NAME_PATTERN = re.compile(r"model_(\d{7,})\.pth")


def _fsync_dir(path: Path) -> None:
    """Makes renames and creations in ``path`` durable (a crash cannot undo them afterwards)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(output_dir: str | os.PathLike, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` as ``model_<step>.pth``, repoint ``last_checkpoint``, prune old ones."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"model_{int(state['step']):07d}.pth"
    write_atomic_with(path, lambda f: torch.save(state, f))
    write_atomic_with(out / POINTER, lambda f: f.write(path.name.encode() + b"\n"))
    # Both renames must be on disk before an older checkpoint goes: otherwise a crash could leave
    # the pointer at a file that is pruned, with the new one not yet durable.
    _fsync_dir(out)
    olds = sorted(p for p in out.glob("model_*.pth") if p != path)
    for p in olds[:max(0, len(olds) - (keep - 1))]:
        p.unlink(missing_ok=True)
    return path


def find_last(output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint ``last_checkpoint`` names, or None when there is none yet.

    When the named file is missing (a partial S3 sync, a deleted file), the newest
    ``model_<step>.pth`` in the directory that loads is used instead, with a warning.

    Raises:
        CheckpointError: the pointer holds anything but a checkpoint name of this directory, or
            its file is missing and no other checkpoint there loads.
    """
    out = Path(output_dir)
    ptr = out / POINTER
    if not ptr.is_file():
        return None
    name = ptr.read_text(errors="replace").strip()
    if not NAME_PATTERN.fullmatch(name):
        raise CheckpointError(f"{ptr} holds {name[:200]!r}; expected the name of a checkpoint in {out}, like "
                              "model_0000100.pth (no directory, no ../); delete or fix the pointer file, or pass "
                              "--resume PATH")
    path = out / name
    if path.is_file():
        return path
    tried = []
    for cand in sorted((p for p in out.iterdir() if NAME_PATTERN.fullmatch(p.name)),
                       key=lambda p: int(NAME_PATTERN.fullmatch(p.name).group(1)), reverse=True):
        try:
            load_checkpoint(cand)
        except CheckpointError as exc:
            tried.append(f"{cand.name}: {exc}")
            continue
        log.warning("%s names %s, which does not exist; resuming from %s, the newest checkpoint that loads",
                    ptr, name, cand)
        return cand
    others = f" ({'; '.join(tried)})" if tried else ""
    raise CheckpointError(f"{ptr} names {name}, which does not exist, and no other checkpoint in {output_dir} "
                          f"loads{others}; delete the pointer file to start over, or pass --resume PATH")


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The state dict of a checkpoint file; only tensors and plain containers are unpickled (never code)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist; expected a model_*.pth written by this trainer")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        refused = _global_refused(exc)
        if refused is None:  # weights_only's unpickler also reports plain corruption this way
            raise CheckpointError(f"checkpoint {path} could not be read ({_global_refused(exc, 'operand')}); "
                                  "it is corrupt: resume from an older model_*.pth") from exc
        raise CheckpointError(f"checkpoint {path} holds objects other than tensors and plain data ({refused}); "
                              "it was not written by this trainer (or by an older version that pickled "
                              "numpy arrays) and is not loaded: resume from another model_*.pth") from exc
    except Exception as exc:  # torch.load raises assorted types for truncated or foreign files
        raise CheckpointError(f"checkpoint {path} could not be read ({exc}); it is corrupt: "
                              "resume from an older model_*.pth") from exc
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}; expected a full trainer checkpoint")
    return state


def _global_refused(exc: BaseException, word: str = "GLOBAL") -> str | None:
    """The line of torch's weights_only error that names what it refused (e.g. ``GLOBAL posix.system``)."""
    for line in str(exc).splitlines():
        if word.lower() in line.lower():
            return line.strip()[:300]
    return None if word == "GLOBAL" else type(exc).__name__


def capture_rng() -> dict[str, Any]:
    """This process's RNG states as tensors and plain tuples (what ``weights_only`` loading accepts)."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": (kind, torch.from_numpy(key.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    kind, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
