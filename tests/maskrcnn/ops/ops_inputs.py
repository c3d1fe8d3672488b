"""Random input builders shared by the detection-op tests (a uniquely named module,
so importing it never picks up another directory's conftest)."""
from __future__ import annotations

import torch


def rand_boxes(g: torch.Generator, n: int, size: float = 100.0, dtype=torch.float32, max_wh: float = 40.0) -> torch.Tensor:
    """n random (x1, y1, x2, y2) boxes with x1 < x2, y1 < y2 inside roughly [0, size]."""
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * size
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * max_wh + 0.5
    return torch.cat([xy, xy + wh], dim=1).to(dtype)


def rand_rois(g: torch.Generator, k: int, batch: int, size: float, dtype=torch.float32) -> torch.Tensor:
    """k rois (batch index, x1, y1, x2, y2); some spill outside a size x size map."""
    b = torch.randint(0, batch, (k, 1), generator=g).to(torch.float64)
    xy = torch.rand(k, 2, generator=g, dtype=torch.float64) * size * 1.2 - size * 0.1
    wh = torch.rand(k, 2, generator=g, dtype=torch.float64) * size * 0.6
    return torch.cat([b, xy, xy + wh], dim=1).to(dtype)


class HostCopies:
    """A dispatch mode that records what the host does for ops on a device: host->device copies
    (``copies``) and host tensors created (``host_outputs``: (op, numel) pairs).  Used with meta
    tensors, which stand in for a device here (no GPU): a copy onto them is what a copy onto a
    GPU would be."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                name = str(func.overloadpacket.__name__)
                src = args[0] if args and isinstance(args[0], torch.Tensor) else None
                if name == "_to_copy" and src is not None and src.device.type == "cpu" and isinstance(out, torch.Tensor) and out.device.type != "cpu":
                    outer.copies.append((name, src.numel()))
                if name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor) and args[1].device.type == "cpu" and args[0].device.type != "cpu":
                    outer.copies.append((name, args[1].numel()))
                for t in out if isinstance(out, (tuple, list)) else (out,):
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                        outer.host_outputs.append((name, t.numel()))
                return out

        self.copies: list[tuple[str, int]] = []
        self.host_outputs: list[tuple[str, int]] = []
        self._mode = _Mode()

    def __enter__(self) -> "HostCopies":
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
