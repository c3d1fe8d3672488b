"""Host-sync counter: which lines of a training step would make the host wait for the GPU.

Where it sits: the test suite (tests/maskrcnn/test_maskrcnn_syncs.py) and the benchmarks run one
training step under ``count_host_syncs()``; the step itself never imports this module.  On CUDA a
step that reads a device value on the host (``.item()``, ``nonzero``, a boolean-mask index, a copy
to the CPU, ...) stalls the CPU until the GPU has drained its queue, so the CPU can no longer run
ahead and launch the next kernels: the GPU idles.  ``torch.cuda.set_sync_debug_mode`` finds those
reads only on a GPU; this counter finds them on the CPU, from the ops the step dispatches, so the
budget can be held in a CPU-only test suite.

Two interception layers, because on a CPU run some syncing calls never reach the dispatcher:

* a ``TorchDispatchMode`` sees every aten op: ``nonzero``, ``_local_scalar_dense`` (``.item()``,
  ``float(t)``, ``bool(t)``, ``int(t)``), ``index``/``index_put_`` with a boolean mask,
  ``masked_select``, ``unique*``, ``repeat_interleave`` without ``output_size``, ``equal``...;
  compiled ops whose CUDA kernels are known to wait inside (``KERNEL_SYNCS``) count too;
* a ``TorchFunctionMode`` sees the Python-level methods that read a tensor into host memory without
  a dispatched op when the tensor is already on the CPU: ``.tolist()``, ``.cpu()``, ``.numpy()``,
  ``.to("cpu")``.

Each sync is attributed to the innermost stack frame inside ``mpirun_kit/`` (other than this file),
as ``path:line`` relative to the repository, so a test failure names the line to fix.
"""
from __future__ import annotations

import collections
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import MpirunKitError

_PKG_ROOT = Path(__file__).resolve().parents[1]  # .../mpirun_kit
_REPO_ROOT = _PKG_ROOT.parent
_THIS = str(Path(__file__).resolve())

#: aten ops that always read a device value on the host (packet name -> why)
_ALWAYS = {
    "nonzero": "nonzero (output size depends on the data)",
    "argwhere": "argwhere (output size depends on the data)",
    "_local_scalar_dense": ".item() / float() / int() / bool() of a tensor",
    "masked_select": "masked_select (output size depends on the data)",
    "_unique": "unique (output size depends on the data)",
    "_unique2": "unique (output size depends on the data)",
    "unique_dim": "unique (output size depends on the data)",
    "unique_consecutive": "unique_consecutive (output size depends on the data)",
    "unique_dim_consecutive": "unique_consecutive (output size depends on the data)",
    "equal": "torch.equal (returns a Python bool)",
    "is_nonzero": "bool() of a tensor",
    "_assert_async": "_assert_async",
}



def _proposal_kernel_syncs(args) -> int:
    # csrc/ops/cuda/proposals_kernel.cu: _unique(levels).cpu() (1), per level .item() + nonzero
    # (2 per level), per image nonzero of the valid flags + nonzero inside the NMS (2 per image),
    # and the counts copied back to the device without non_blocking (1).
    objectness, levels = args[1], args[4] if len(args) > 4 else None
    per_level = 2 * len(set(levels.tolist())) + 1 if isinstance(levels, torch.Tensor) else 0
    return per_level + 2 * objectness.shape[0] + 1


#: compiled ops whose CUDA kernels wait for the device inside, and how often for given arguments;
#: they count on the CPU too, because the CUDA path would pay for them.  Keep in sync with the
#: allow-list of the csrc source check in tests/maskrcnn/test_maskrcnn_syncs.py.
KERNEL_SYNCS: dict[str, Callable[[tuple], int]] = {
    "mpirun_kit::generate_proposals": _proposal_kernel_syncs,  # the inference path's; training uses _padded
}

#: Tensor methods that copy device data into host memory (seen by the function mode)
_HOST_METHODS = {"tolist": ".tolist()", "cpu": ".cpu()", "numpy": ".numpy()"}


@dataclass
class SyncReport:
    """What one counted region did: every host read, with its reason and source line."""

    events: list[tuple[str, str]] = field(default_factory=list)  # (where, reason)

    @property
    def count(self) -> int:
        return len(self.events)

    def by_line(self) -> list[tuple[str, str, int]]:
        """(where, reason, count), most frequent first."""
        c = collections.Counter(self.events)
        return [(w, r, n) for (w, r), n in c.most_common()]

    def format(self) -> str:
        if not self.events:
            return "no host syncs"
        lines = [f"{self.count} host sync(s):"]
        lines += [f"  {n:3d} x {w}: {r}" for w, r, n in self.by_line()]
        return "\n".join(lines)


def _where() -> str:
    f = sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename
        if path != _THIS and path.startswith(str(_PKG_ROOT)) and "/syncs.py" not in path:
            return f"{Path(path).relative_to(_REPO_ROOT)}:{f.f_lineno}"
        f = f.f_back
    return "<outside mpirun_kit>"


def _called_from_package() -> bool:
    # On a CPU run ``.to(device)`` cannot tell "to the host" from "to the (CPU) training device";
    # count it where our code calls it (a device move it means), not inside torch (where a
    # ``.to(device)`` of a tensor already there is a no-op on CUDA too)
    f = sys._getframe(3)
    return f is not None and f.f_code.co_filename.startswith(str(_PKG_ROOT)) and f.f_code.co_filename != _THIS


def _has_bool_index(indices) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices or ())


def _dispatch_reason(func, args, kwargs) -> str | None:
    name = func._overloadpacket.__name__
    ns = func.namespace
    if ns == "aten":
        if name in _ALWAYS:
            return _ALWAYS[name]
        if name in ("index", "_index_put_impl_", "index_put", "index_put_", "_unsafe_index_put") and len(args) > 1:
            if _has_bool_index(args[1]):
                return f"boolean-mask {name} (output size / write set depends on the data)"
        if name == "repeat_interleave" and kwargs.get("output_size") is None and (
                len(args) < 3 or args[-1] is None) and isinstance(args[0], torch.Tensor) and (
                len(args) == 1 or isinstance(args[1], torch.Tensor)):
            return "repeat_interleave without output_size"
        if name in ("_to_copy", "copy_"):
            src = args[1] if name == "copy_" else args[0]
            dst_dev = args[0].device if name == "copy_" else kwargs.get("device")
            if isinstance(src, torch.Tensor) and src.device.type not in ("cpu", "meta") and dst_dev is not None \
                    and torch.device(dst_dev).type == "cpu":
                return "copy to the CPU"
        return None
    if f"{ns}::{name}" in KERNEL_SYNCS:
        return f"{ns}::{name} waits for the device inside its CUDA kernel"
    return None


class _DispatchCounter(TorchDispatchMode):
    def __init__(self, report: SyncReport):
        super().__init__()
        self.report = report

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        reason = _dispatch_reason(func, args, kwargs)
        if reason:
            where = _where()
            kernel = KERNEL_SYNCS.get(f"{func.namespace}::{func._overloadpacket.__name__}")
            times = kernel(args) if kernel else 1
            self.report.events.extend([(where, reason)] * times)
        return func(*args, **kwargs)


def _is_cpu_target(args, kwargs) -> bool:
    for a in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(a, (str, torch.device)):
            try:
                return torch.device(a).type == "cpu"
            except RuntimeError:
                return False
    return False


class _FunctionCounter(TorchFunctionMode):
    def __init__(self, report: SyncReport):
        super().__init__()
        self.report = report

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _HOST_METHODS and args and isinstance(args[0], torch.Tensor):
            self.report.events.append((_where(), _HOST_METHODS[name]))
        elif name == "to" and args and isinstance(args[0], torch.Tensor) and _is_cpu_target(args, kwargs) \
                and not kwargs.get("non_blocking", False) and _called_from_package():
            # on a CPU run the target "cpu" is also the training device: either way (device -> host,
            # or a host tensor -> device without non_blocking) CUDA makes the host wait
            self.report.events.append((_where(), ".to(device) without non_blocking (a synchronous copy)"))
        elif name in ("tensor", "as_tensor") and kwargs.get("device") is not None and _called_from_package():
            self.report.events.append((_where(), f"torch.{name}(host data, device=...) (a synchronous copy)"))
        return func(*args, **kwargs)


class count_host_syncs:
    """``with count_host_syncs() as report: step()`` -> ``report.count``, ``report.format()``."""

    def __init__(self) -> None:
        self.report = SyncReport()
        self._modes = [_FunctionCounter(self.report), _DispatchCounter(self.report)]

    def __enter__(self) -> SyncReport:
        for m in self._modes:
            m.__enter__()
        return self.report

    def __exit__(self, *exc) -> None:
        for m in reversed(self._modes):
            m.__exit__(*exc)


#: The host reads the training loop makes outside the step, declared with their period: the step
#: itself must stay within the per-step budget (tests/maskrcnn/test_maskrcnn_syncs.py); these are
#: the only other ones (train.py ``Trainer._train``).
PERIODIC_SYNCS: dict[str, str] = {
    "log step (every log_period steps)": "the mean of the device-side loss window, copied to the host once "
                                         "and all-reduced together with the SIGTERM stop flag",
    "checkpoint (every checkpoint_period steps)": "the state dicts, saved by rank 0",
}


class HostSyncError(MpirunKitError):
    """A step under ``fail_on_host_syncs`` did something that makes a CUDA host wait or mixes devices."""


def cuda_semantics_problem(func, args, kwargs, device: str = "cuda") -> str | None:
    """Why this aten call would stall or break a CUDA step, or None.

    ``device``: the device type standing for the GPU -- ``cuda`` (fake CUDA tensors) or ``meta``
    (the backward gate: autograd and the optimizer run on meta tensors, which fake CUDA cannot).

    Judged from the op's tags and arguments, so it works on fake ``cuda`` tensors (no GPU): an op
    tagged data-dependent (its result is read on the host: ``.item()``, ``nonzero``, ``equal``...),
    a dynamic-shape op (its output size is read on the host) -- except indexing with integer
    indices, which is tagged dynamic but does not sync --, a device -> host copy, a blocking
    host -> device copy, or host and device tensors in one op (0-dim host scalars aside: torch
    passes those as kernel arguments).
    """
    name = func._overloadpacket.__name__
    tags = getattr(func, "tags", ())
    tensors = [a for a in _flat(args, kwargs) if isinstance(a, torch.Tensor)]
    devs = {t.device.type for t in tensors}
    if name in ("_to_copy", "copy_"):
        src = args[1] if name == "copy_" else args[0]
        if name == "copy_":
            dst = args[0].device.type
            blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        else:
            dst = torch.device(kwargs["device"]).type if kwargs.get("device") is not None else src.device.type
            blocking = not kwargs.get("non_blocking", False)
        if src.device.type == device and dst == "cpu":
            return f"aten.{name}: a device -> host copy (the host waits for the GPU to drain)"
        if src.device.type == "cpu" and dst == device and blocking and src.dim() > 0:
            return f"aten.{name}: a blocking host -> device copy (use pinned memory and non_blocking=True)"
        return None
    if torch.Tag.data_dependent_output in tags:
        return f"aten.{name}: its result is read on the host (data-dependent output)"
    if torch.Tag.dynamic_output_shape in tags:
        if name in ("index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"):
            idx = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if _has_bool_index(idx):
                return f"aten.{name} with a boolean mask: its output size is read on the host"
            return None
        if name == "repeat_interleave" and (kwargs.get("output_size") is not None or (
                len(args) > 3 and args[3] is not None)):
            return None
        return f"aten.{name}: its output size depends on the data (read on the host)"
    if device in devs and any(t.device.type == "cpu" and t.dim() > 0 for t in tensors):
        return f"aten.{name} mixes host and device tensors"
    return None


def _flat(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


class fail_on_host_syncs(TorchDispatchMode):
    """Raise ``HostSyncError`` listing every op ``cuda_semantics_problem`` flags, each naming our line.

    Enter it inside a ``FakeTensorMode`` (so it sees every op before the fake kernels answer it):
    tests/maskrcnn/fake_cuda_gate.py runs the trainer's forward this way on fake ``cuda:0``
    tensors.  With ``device="meta"`` it judges meta tensors as device tensors:
    tests/maskrcnn/test_maskrcnn_gpu_path.py runs the trainer's backward and optimizer step
    (``Trainer.backward_and_step``) so, since autograd runs on meta and not on fake CUDA.  The ops
    run on (fake and meta tensors keep their shapes), so one run lists all the problems, raised on
    leaving the block; an op that cannot run without the data (``.item()``, ``nonzero`` on meta or
    fake tensors) raises ``HostSyncError`` with the problems so far at once.
    """

    def __init__(self, device: str = "cuda") -> None:
        super().__init__()
        self.device = device
        self.problems: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        problem = cuda_semantics_problem(func, args, kwargs, self.device)
        if problem:
            self.problems.append(f"{_where()}: {problem}")
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            if problem:
                raise HostSyncError(self._text() + f"\n(stopped there: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc
            raise

    def _text(self) -> str:
        c = collections.Counter(self.problems)
        return (f"{len(self.problems)} op(s) that stall or break a CUDA step:\n"
                + "\n".join(f"  {n:3d} x {p}" for p, n in c.most_common()))

    def __exit__(self, exc_type, exc, tb):
        super().__exit__(exc_type, exc, tb)
        if exc_type is None and self.problems:
            raise HostSyncError(self._text())
        return False
