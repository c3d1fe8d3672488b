"""Fake (meta) kernels for the compiled ops, so they trace under torch.compile.

The loader (_loader.py) calls ``register_fakes()`` right after the library that
defines the schemas is loaded; registering against an undefined op would fail.
Each fake kernel returns empty tensors with the shape, dtype, device and layout
the real kernel produces; data-dependent sizes (how many boxes NMS keeps) are
unbacked symbolic sizes from ``ctx.new_dynamic_size()``.  The ops' autocast rule
(float32, _autocast.py) is registered here too: both are Python-side registrations that
need the library's schemas, so they share this one entry point.
"""
from __future__ import annotations

import threading

import torch

from . import _autocast

_lock = threading.Lock()
_registered = False


def _is_channels_last(t: torch.Tensor) -> bool:
    # The kernels' own rule (csrc/ops/cpu/roi_align_kernel.cpp): channels-last
    # output only when the tensor is channels-last contiguous and not plain contiguous.
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def register_fakes() -> None:
    """Register every fake kernel and the autocast rule once per process (later calls do nothing)."""
    global _registered
    with _lock:
        if _registered:
            return
        _register()
        _autocast.register()
        _registered = True


def _register() -> None:
    lib = "mpirun_kit::"

    @torch.library.register_fake(lib + "nms")
    def _nms(boxes, scores, iou_threshold):
        n = torch.library.get_ctx().new_dynamic_size()
        return boxes.new_empty((n,), dtype=torch.int64)

    @torch.library.register_fake(lib + "batched_nms")
    def _batched_nms(boxes, scores, idxs, iou_threshold, max_keep=-1):
        n = torch.library.get_ctx().new_dynamic_size()
        return boxes.new_empty((n,), dtype=torch.int64)

    @torch.library.register_fake(lib + "box_iou")
    def _box_iou(a, b):
        return a.new_empty((a.shape[0], b.shape[0]))

    @torch.library.register_fake(lib + "encode_boxes")
    def _encode(reference_boxes, proposals, weights):
        return reference_boxes.new_empty((reference_boxes.shape[0], 4))

    @torch.library.register_fake(lib + "decode_boxes")
    def _decode(deltas, boxes, weights, clip_value):
        return deltas.new_empty(deltas.shape)

    @torch.library.register_fake(lib + "grid_anchors")
    def _grid_anchors(cell_anchors, height, width, stride):
        return cell_anchors.new_empty((height * width * cell_anchors.shape[0], 4))

    @torch.library.register_fake(lib + "roi_align")
    def _roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        mf = torch.channels_last if _is_channels_last(input) else torch.contiguous_format
        shape = (rois.shape[0], input.shape[1], pooled_height, pooled_width)
        return torch.empty(shape, dtype=input.dtype, device=input.device, memory_format=mf)

    @torch.library.register_fake(lib + "_roi_align_backward")
    def _roi_align_backward(grad, rois, spatial_scale, pooled_height, pooled_width, batch_size, channels, height, width, sampling_ratio, aligned):
        mf = torch.channels_last if _is_channels_last(grad) else torch.contiguous_format
        return torch.empty((batch_size, channels, height, width), dtype=grad.dtype, device=grad.device, memory_format=mf)

    @torch.library.register_fake(lib + "generate_proposals_padded")
    def _generate_proposals_padded(anchors, objectness, deltas, image_sizes, level_sizes, pre_nms_top_n, post_nms_top_n, nms_thresh, min_size, weights, clip_value):
        b = objectness.shape[0]
        return (anchors.new_empty((b, post_nms_top_n, 4)), objectness.new_empty((b, post_nms_top_n)),
                objectness.new_empty((b,), dtype=torch.int64))

    @torch.library.register_fake(lib + "generate_proposals")
    def _generate_proposals(anchors, objectness, deltas, image_sizes, levels, pre_nms_top_n, post_nms_top_n, nms_thresh, min_size, weights, clip_value):
        n = torch.library.get_ctx().new_dynamic_size()
        boxes = anchors.new_empty((n, 4))
        scores = objectness.new_empty((n,))
        counts = objectness.new_empty((objectness.shape[0],), dtype=torch.int64)
        return boxes, scores, counts
