"""Input checks shared by the op wrappers and the references.

Every public op validates its arguments here before choosing a backend, so the
compiled kernels and the pure-PyTorch references reject the same inputs with the
same message.  The C++ kernels repeat the checks with TORCH_CHECK (they can be
called directly through ``torch.ops.mpirun_kit``), in the same wording.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ...errors import SpecError
from . import _autocast


class OpInputError(SpecError, ValueError):
    """A detection op got an argument of the wrong shape, dtype, device or value.

    It is both a ``SpecError`` (the mpirun_kit hierarchy: exit code 64 when it
    reaches the CLI) and a ``ValueError`` (what PyTorch users catch), so either
    catch style works.
    """


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def check_boxes(name: str, boxes: object, *, cols: int = 4) -> torch.Tensor:
    """Check that ``boxes`` is a floating [N, cols] tensor and return it."""
    if not isinstance(boxes, torch.Tensor):
        raise OpInputError(f"{name} must be a torch.Tensor of shape [N, {cols}], got {type(boxes).__name__}")
    if boxes.dim() != 2 or boxes.shape[1] != cols:
        raise OpInputError(
            f"{name} must be [N, {cols}], got {_shape(boxes)}; "
            f"pass boxes as rows of (x1, y1, x2, y2)" + (" after the batch index" if cols == 5 else "")
        )
    check_float(name, boxes)
    return boxes


#: dtypes each device's kernels accept (CUDA accumulates half types in float32).
SUPPORTED_DTYPES = {
    "cpu": (torch.float32, torch.float64),
    "cuda": (torch.float32, torch.float16, torch.bfloat16, torch.float64),
}


def check_dtype(name: str, t: torch.Tensor) -> None:
    """Only the dtypes the kernels of ``t``'s device implement (references follow the same rule);
    under autocast, the dtype the op's float32 rule gives it (_autocast.py)."""
    allowed = SUPPORTED_DTYPES.get(t.device.type)
    if allowed is not None and _autocast.op_dtype(t) not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise OpInputError(f"{name} has dtype {t.dtype}, which the {t.device.type} kernels do not support; use one of {names}")


def check_float(name: str, t: torch.Tensor) -> None:
    """Reject integer and complex tensors: every op works on real floating types."""
    if not t.is_floating_point():
        raise OpInputError(f"{name} must be a floating-point tensor, got dtype {t.dtype}; convert it with .float()")
    check_dtype(name, t)


def check_vector(name: str, t: object, n: int, n_name: str) -> torch.Tensor:
    """Check that ``t`` is a 1-D tensor of length ``n`` (the length of ``n_name``)."""
    if not isinstance(t, torch.Tensor):
        raise OpInputError(f"{name} must be a torch.Tensor of shape [{n}], got {type(t).__name__}")
    if t.dim() != 1 or t.shape[0] != n:
        raise OpInputError(f"{name} must be [N] with N = {n} (the rows of {n_name}), got {_shape(t)}")
    return t


def check_same_device(**tensors: torch.Tensor) -> None:
    """All tensors on one device; the message names each tensor's device."""
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {dev}" for name, dev in devices.items())
        raise OpInputError(f"all inputs must be on one device, got {listing}; move them with .to(device)")


def check_threshold(name: str, value: float) -> float:
    """An IoU threshold: a finite float (values outside [0, 1] are legal but odd, so only NaN is refused)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise OpInputError(f"{name} must be a float, got {value!r}") from None
    if v != v:
        raise OpInputError(f"{name} must be a number, got NaN")
    return v


def check_weights(weights: Sequence[float]) -> tuple[float, float, float, float]:
    """Box-coder weights: four positive floats (wx, wy, ww, wh)."""
    try:
        w = tuple(float(x) for x in weights)
    except (TypeError, ValueError):
        raise OpInputError(f"weights must be 4 floats (wx, wy, ww, wh), got {weights!r}") from None
    if len(w) != 4 or any(not x > 0 for x in w):
        raise OpInputError(f"weights must be 4 positive floats (wx, wy, ww, wh), got {weights!r}; e.g. (10.0, 10.0, 5.0, 5.0)")
    return w  # type: ignore[return-value]


def check_output_size(output_size: int | Sequence[int]) -> tuple[int, int]:
    """RoI output size: an int or an (h, w) pair of positive ints."""
    if isinstance(output_size, int):
        size = (output_size, output_size)
    else:
        size = tuple(output_size)  # type: ignore[assignment]
    if len(size) != 2 or any(not isinstance(s, int) or isinstance(s, bool) or s <= 0 for s in size):
        raise OpInputError(f"output_size must be a positive int or an (h, w) pair of positive ints, got {output_size!r}")
    return size  # type: ignore[return-value]


def check_roi_align_inputs(input: object, rois: object, sampling_ratio: int) -> None:
    """Shapes and types for roi_align: input [N, C, H, W], rois [K, 5]."""
    if not isinstance(input, torch.Tensor) or input.dim() != 4:
        got = _shape(input) if isinstance(input, torch.Tensor) else type(input).__name__
        raise OpInputError(f"input must be [N, C, H, W], got {got}")
    check_float("input", input)
    check_boxes("rois", rois, cols=5)
    if _autocast.op_dtype(rois) != _autocast.op_dtype(input):  # type: ignore[arg-type]
        raise OpInputError(f"rois must have the dtype of input ({input.dtype}), got {rois.dtype}; convert with rois.to(input.dtype)")  # type: ignore[union-attr]
    check_same_device(input=input, rois=rois)  # type: ignore[arg-type]
    if not isinstance(sampling_ratio, int) or isinstance(sampling_ratio, bool):
        raise OpInputError(f"sampling_ratio must be an int (<= 0 = adaptive, ceil(roi_size / output_size) samples per bin), got {sampling_ratio!r}")
    if input.shape[2] == 0 or input.shape[3] == 0:  # type: ignore[union-attr]
        raise OpInputError(f"input must have a non-empty H x W map, got {_shape(input)}")  # type: ignore[arg-type]
