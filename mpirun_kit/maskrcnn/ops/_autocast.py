"""The detection ops' autocast rule: they compute in float32 inside an autocast region.

Data flow: the model runs under ``torch.autocast`` (bf16 on GPUs, see config.py), so the RPN
head's logits and the FPN features reach the ops in bf16/fp16.  Box coordinates in half
precision are off by pixels at 800x1333 (bf16 keeps 8 bits of mantissa: x = 1000 is exact to
+-4 px), so every op has an fp32 rule at the op itself, registered next to its fake kernel when
the library loads (``_meta.register_fakes`` calls ``register``): inside an autocast region for
the tensors' device type, floating inputs (float64 aside) are cast to float32 and the op runs
with autocast off, returning float32, as torch does for its own fp32-listed ops (e.g.
``binary_cross_entropy_with_logits``).  Autograd casts the gradient back to the input's dtype.

The wrappers (ops/*.py) check dtypes as the op will see them (``op_dtype``), and when the
references run instead of the library they apply the same rule by hand (``cast``): the
references are plain Python, not dispatcher ops, so no registration reaches them.
"""
from __future__ import annotations

import torch

#: every op of the library: each one computes in float32 under autocast.
FP32_OPS = ("nms", "batched_nms", "box_iou", "encode_boxes", "decode_boxes", "grid_anchors", "roi_align",
            "_roi_align_backward", "generate_proposals", "generate_proposals_padded")

#: the library's functions that take and return no tensor (a thread setting, not a kernel): autocast
#: has nothing to cast and opcheck nothing to check, so they get neither; each has its own test.
TENSORLESS_OPS = ("set_flush_denormal",)

#: device types that have an autocast mode (and a dispatch key torch registers rules under).
DEVICE_TYPES = ("cpu", "cuda")


def register() -> None:
    """Register the float32 rule of every op for every autocast device type (once per process:
    the caller, ``_meta.register_fakes``, runs once)."""
    for op in FP32_OPS:
        for device_type in DEVICE_TYPES:
            torch.library.register_autocast(f"mpirun_kit::{op}", device_type, torch.float32)


def enabled(device: torch.device) -> bool:
    """True inside an autocast region for ``device``'s type (meta and other devices: never)."""
    return device.type in DEVICE_TYPES and torch.is_autocast_enabled(device.type)


def _eligible(t: torch.Tensor) -> bool:
    # torch's own rule for what autocast casts: floating tensors of that device, float64 excepted
    return t.is_floating_point() and t.dtype != torch.float64 and enabled(t.device)


def op_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype the op computes ``t`` in: float32 when the autocast rule casts it, else its own."""
    return torch.float32 if _eligible(t) else t.dtype


def cast(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rule applied by hand, for the reference fallback: eligible tensors to float32."""
    return tuple(t.float() if isinstance(t, torch.Tensor) and _eligible(t) else t for t in tensors)
