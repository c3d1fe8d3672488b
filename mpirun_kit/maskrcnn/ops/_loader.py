"""Loads the compiled op library (mpirun_kit/maskrcnn/_C*.so) and decides the backend.

Data flow: the public wrappers (ops/__init__.py) ask the active ``ExtensionLoader``
whether the compiled ops are there; if yes they call ``torch.ops.mpirun_kit.*``,
otherwise they run the pure-PyTorch references (reference.py) after a ONE-time
``OpsFallbackWarning`` that quotes the original load error.  The error object
itself is kept (``load_error()``) and chained into ``OpsUnavailableError`` by
``require()``: unlike torchvision's extension.py we never swallow the real cause
(an undefined symbol, a torch ABI mismatch, a missing file).

Loading is lazy (first op call) so that importing the package stays cheap and
has no side effects.  The library registers its ops by static initialisers
(TORCH_LIBRARY), so it is loaded with ``torch.ops.load_library`` (dlopen), not
imported as a Python module.
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

from ...errors import LaunchError

#: how to rebuild, quoted in every message about a missing extension.
REBUILD_HINT = "rebuild it with `python setup.py build_ext --inplace` (or `pip install --no-build-isolation -e .`) in the repository root"


class OpsFallbackWarning(RuntimeWarning):
    """The compiled ops could not be loaded; the slow pure-PyTorch references run instead."""


class OpsUnavailableError(LaunchError):
    """The compiled ops were required (``require()``) but could not be loaded."""


def default_library_path() -> Path | None:
    """Path of the built ``mpirun_kit/maskrcnn/_C*.so`` next to this package, or None if absent."""
    pkg = Path(__file__).resolve().parents[1]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = pkg / f"_C{suffix}"
        if candidate.exists():
            return candidate
    return None


def describe_error(err: BaseException | None) -> str:
    """``Type: message`` of an error and of each error it was raised from.

    torch.ops.load_library re-raises the dlopen failure as a generic "Could not
    load this library" OSError; the real reason (undefined symbol, invalid ELF
    header) is only in the chained cause, so the chain is spelled out.
    """
    parts = []
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        parts.append(f"{type(err).__name__}: {err}")
        err = err.__cause__ or err.__context__
    return " (caused by ".join(parts) + ")" * (len(parts) - 1)


class ExtensionLoader:
    """Loads one op library at most once and remembers the outcome.

    Args:
        path: the shared library to load; None means "not built" and is reported
            as such (with the rebuild hint) instead of being looked up again.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._done = False
        self._error: BaseException | None = None
        self._warned = False

    def __repr__(self) -> str:
        return f"ExtensionLoader(path={str(self.path) if self.path else None!r})"

    def load(self) -> BaseException | None:
        """Load the library (first call only); return the load error, or None on success."""
        with self._lock:
            if not self._done:
                self._error = self._load()
                self._done = True
            return self._error

    def _load(self) -> BaseException | None:
        if self.path is None:
            return FileNotFoundError("no mpirun_kit/maskrcnn/_C*.so next to the package (the extension was never built)")
        import torch

        try:
            torch.ops.load_library(str(self.path))
        except (OSError, RuntimeError, ImportError) as exc:
            # Kept, not swallowed: load_error() returns it and require() chains it.
            return exc
        from . import _meta

        _meta.register_fakes()
        return None

    @property
    def available(self) -> bool:
        """True when the compiled ops are loaded and usable."""
        return self.load() is None

    def fallback_message(self) -> str:
        """The one-time warning text: what failed, the original error, and the fix."""
        err = self.load()
        return (
            f"mpirun_kit detection ops: could not load the compiled extension {str(self.path) if self.path else '(not built)'}: "
            f"{describe_error(err)}; falling back to the pure-PyTorch references (correct but slow); {REBUILD_HINT}"
        )

    def warn_fallback(self, stacklevel: int = 3) -> None:
        """Emit ``OpsFallbackWarning`` once per loader; later fallbacks are silent."""
        with self._lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(self.fallback_message(), OpsFallbackWarning, stacklevel=stacklevel)

    def require(self) -> None:
        """Raise ``OpsUnavailableError`` (chained to the original error) unless the ops are loaded."""
        err = self.load()
        if err is not None:
            raise OpsUnavailableError(self.fallback_message().split("; falling back")[0] + f"; {REBUILD_HINT}") from err


_active: ExtensionLoader | None = None
_active_lock = threading.Lock()


def active() -> ExtensionLoader:
    """The loader the wrappers use: the built library next to the package, unless ``using()`` swapped it."""
    global _active
    with _active_lock:
        if _active is None:
            _active = ExtensionLoader(default_library_path())
        return _active


@contextlib.contextmanager
def using(loader: ExtensionLoader) -> Iterator[ExtensionLoader]:
    """Run the wrappers against ``loader`` inside the block (e.g. a bogus path forces the references)."""
    global _active
    prev = active()
    with _active_lock:
        _active = loader
        _decided.clear()
    try:
        yield loader
    finally:
        with _active_lock:
            _active = prev
            _decided.clear()


_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def use_compiled(op: str, device: "torch.device") -> bool:  # noqa: F821 - torch imported lazily
    """True when the wrappers should call ``torch.ops.mpirun_kit.<op>`` for tensors on ``device``.

    False (after the one-time warning) when the library did not load, or when it
    was built without kernels for that device (a CPU-only build given CUDA tensors).
    The answer is cached per (op, device type) in a plain dict, so that after the
    first eager call torch.compile traces the wrappers without meeting a lock.
    """
    key = (op, device.type)
    hit = _decided.get(key)
    if hit:
        return hit
    if _fake_active() and _loaded():
        # fake tensors (FakeTensorMode, torch.compile tracing): the registered fake kernels
        # (_meta.py) answer for every device type, also where the library has no kernels for the
        # device itself; the pure-PyTorch references would read data the fake tensors lack.  Not
        # cached: a real tensor of the same device type may still need the references.
        return True
    if hit is not None:
        return hit
    decision = _decide(op, device)
    _decided[key] = decision
    return decision


def _loaded() -> bool:
    """The active library loaded, read without the lock (torch.compile cannot trace a lock).

    Loads it first outside a trace; inside one an unloaded library reads as absent, so call
    ``active().load()`` before compiling (the trainer does).
    """
    import torch

    loader = _active
    if loader is None or not loader._done:
        if torch.compiler.is_compiling():
            return False
        return active().available
    return loader._error is None


def _fake_active() -> bool:
    """True while a FakeTensorMode is active or torch.compile is tracing."""
    import torch

    if torch.compiler.is_compiling():
        return True
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def _decide(op: str, device: "torch.device") -> bool:  # noqa: F821
    loader = active()
    if not loader.available:
        loader.warn_fallback(stacklevel=5)
        return False
    key = _DISPATCH_KEYS.get(device.type)
    if key is None:
        return True  # meta / fake tensors: the fake kernels in _meta.py answer
    import torch

    if torch._C._dispatch_has_kernel_for_dispatch_key(f"mpirun_kit::{op}", key):
        return True
    _warn_no_device_kernels(device.type)
    return False


#: (op, device type) -> use the compiled op; cleared whenever the active loader changes.
_decided: dict[tuple[str, str], bool] = {}


_no_device_warned: set[str] = set()


def _warn_no_device_kernels(device_type: str) -> None:
    with _active_lock:
        if device_type in _no_device_warned:
            return
        _no_device_warned.add(device_type)
    warnings.warn(
        f"mpirun_kit detection ops: the compiled extension has no {device_type} kernels (it was built where "
        f"torch.cuda was unavailable or nvcc was missing); falling back to the pure-PyTorch references; "
        f"rebuild on a machine with CUDA torch and nvcc: {REBUILD_HINT}",
        OpsFallbackWarning,
        stacklevel=5,
    )
