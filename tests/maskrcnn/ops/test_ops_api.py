"""The public API's contract: input errors (each message's text), the loader's
fallback with its one-time warning, and chaining of the original load error.

The fallback is exercised for real: an ExtensionLoader pointed at a path that
does not exist, or at a file that is not a shared library, fails inside
torch.ops.load_library exactly as a broken build would; nothing is mocked.
"""
from __future__ import annotations

import warnings

import pytest
import torch

from mpirun_kit.errors import SpecError
from mpirun_kit.maskrcnn import ops
from mpirun_kit.maskrcnn.ops import _loader, reference

from ops_inputs import rand_boxes, rand_rois

B = torch.tensor([[0.0, 0.0, 4.0, 4.0], [1.0, 1.0, 5.0, 5.0]])


# ------------------------------------------------------------ input errors
@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ops.nms(torch.zeros(3, 5), torch.zeros(3), 0.5), r"boxes must be \[N, 4\], got \[3, 5\]"),
        (lambda: ops.nms(B, torch.zeros(3), 0.5), r"scores must be \[N\] with N = 2 \(the rows of boxes\), got \[3\]"),
        (lambda: ops.nms(B.long(), torch.zeros(2), 0.5), r"boxes must be a floating-point tensor, got dtype torch.int64"),
        (lambda: ops.nms(B, torch.zeros(2, dtype=torch.float64), 0.5), r"scores must have the dtype of boxes \(torch.float32\), got torch.float64"),
        (lambda: ops.nms(B.half(), torch.zeros(2).half(), 0.5), r"boxes has dtype torch.float16, which the cpu kernels do not support; use one of float32, float64"),
        (lambda: ops.nms(B, torch.zeros(2), float("nan")), r"iou_threshold must be a number, got NaN"),
        (lambda: ops.nms(B, torch.zeros(2), "high"), r"iou_threshold must be a float, got 'high'"),
        (lambda: ops.batched_nms(B, torch.zeros(2), torch.zeros(2), 0.5), r"idxs must be an integer tensor \(a group id per box\), got dtype torch.float32"),
        (lambda: ops.batched_nms(B, torch.zeros(2), torch.zeros(2, dtype=torch.int64), 0.5, max_keep=-1),
         r"max_keep must be a count >= 0 of kept boxes to return \(or None for all\), got -1"),
        (lambda: ops.batched_nms(B, torch.zeros(2), torch.zeros(2, dtype=torch.int64), 0.5, max_keep=2.0),
         r"max_keep must be a count >= 0 of kept boxes to return \(or None for all\), got 2.0"),
        (lambda: ops.box_iou(B, B.double()), r"a and b must have one dtype, got torch.float32 and torch.float64"),
        (lambda: ops.encode_boxes(B, B[:1]), r"reference_boxes and proposals must have one row each per pair, got 2 and 1 rows"),
        (lambda: ops.encode_boxes(B, B, (1.0, 1.0, 0.0, 1.0)), r"weights must be 4 positive floats \(wx, wy, ww, wh\), got \(1.0, 1.0, 0.0, 1.0\)"),
        (lambda: ops.decode_boxes(torch.zeros(2, 6), B), r"deltas must be \[N, 4\*K\] \(4 values per class\), got \[2, 6\]"),
        (lambda: ops.decode_boxes(torch.zeros(3, 4), B), r"boxes must have one row per row of deltas \(3\), got 2 rows"),
        (lambda: ops.roi_align(torch.zeros(2, 3, 4), B, 2), r"input must be \[N, C, H, W\], got \[2, 3, 4\]"),
        (lambda: ops.roi_align(torch.zeros(1, 3, 4, 4), B, 2), r"rois must be \[N, 5\], got \[2, 4\]; pass boxes as rows of \(x1, y1, x2, y2\) after the batch index"),
        (lambda: ops.roi_align(torch.zeros(1, 3, 4, 4), torch.tensor([[1.0, 0, 0, 2, 2]]), 2), r"rois\[:, 0\] must be batch indices in \[0, 0\], got values in \[1, 1\]"),
        (lambda: ops.roi_align(torch.zeros(1, 3, 4, 4), torch.tensor([[0.0, 0, 0, 2, 2]]), (2, 0)), r"output_size must be a positive int or an \(h, w\) pair of positive ints, got \(2, 0\)"),
        (lambda: ops.roi_align(torch.zeros(1, 3, 4, 4), torch.tensor([[0.0, 0, 0, 2, 2]]), 2, sampling_ratio=1.5), r"sampling_ratio must be an int"),
        (lambda: ops.roi_align(torch.zeros(1, 3, 4, 4), torch.tensor([[0.0, 0, 0, 2, 2]], dtype=torch.float64), 2), r"rois must have the dtype of input \(torch.float32\), got torch.float64"),
        (lambda: ops.multiscale_roi_align([torch.zeros(1, 1, 4, 4)] * 2, torch.zeros(1, 5), 2, 2, [4, 12]), r"strides\[1\] must be a power of two \(4, 8, 16, 32 for P2..P5\), got 12"),
        (lambda: ops.multiscale_roi_align([torch.zeros(1, 1, 4, 4)] * 2, torch.zeros(1, 5), 2, 2, [4]), r"features and strides must pair up one per FPN level, got 2 features and 1 strides"),
        (lambda: ops.MultiScaleRoIAlign(7, 2)([torch.zeros(1, 1, 4, 4)], torch.zeros(1, 5)), r"MultiScaleRoIAlign\(levels=\(2, 5\)\) expects 4 feature maps \(P2..P5\), got 1"),
        (lambda: ops.generate_anchors([(2, 2)], [4, 8], ((32,),), (1.0,)), r"feature_sizes, strides and sizes must have one entry per level, got 1, 2 and 1"),
        (lambda: ops.generate_proposals(B, torch.zeros(1, 3), torch.zeros(1, 2, 4), [(9, 9)], ops.ProposalParams(5, 5, 0.7, 0.0)), r"objectness must be \[B, A\] with A = 2 \(the rows of anchors\), got \[1, 3\]"),
        (lambda: ops.generate_proposals(B, torch.zeros(1, 2), torch.zeros(1, 2, 3), [(9, 9)], ops.ProposalParams(5, 5, 0.7, 0.0)), r"deltas must be \[B, A, 4\] = \[1, 2, 4\], got \[1, 2, 3\]"),
        (lambda: ops.generate_proposals(B, torch.zeros(1, 2), torch.zeros(1, 2, 4), [(9, 9), (9, 9)], ops.ProposalParams(5, 5, 0.7, 0.0)), r"image_sizes must hold one \(h, w\) per image \(1 images\), got \[\(9, 9\), \(9, 9\)\]"),
        (lambda: ops.generate_proposals(B, torch.zeros(1, 2), torch.zeros(1, 2, 4), [(9, 9)], ops.ProposalParams(0, 5, 0.7, 0.0)), r"pre_nms_top_n must be an int >= 1, got 0"),
        (lambda: ops.generate_proposals(B, torch.zeros(1, 2), torch.zeros(1, 2, 4), [(9, 9)], ops.ProposalParams(5, 5, 0.7, -1.0)), r"min_size must be >= 0 pixels, got -1.0"),
        (lambda: ops.generate_proposals(B, torch.zeros(1, 2), torch.zeros(1, 2, 4), [(9, 9)], ops.ProposalParams(5, 5, 0.7, 0.0), levels=torch.zeros(2)), r"levels must be an integer \[A\] tensor with A = 2 \(one level per anchor\), got torch.float32 \[2\]"),
        (lambda: ops.boxes_to_rois([]), r"boxes must hold one \[L, 4\] tensor per image, got an empty list"),
    ],
)
def test_input_errors_name_the_value(call, message):
    with pytest.raises(ops.OpInputError, match=message) as info:
        call()
    # both catch styles work
    assert isinstance(info.value, SpecError) and isinstance(info.value, ValueError)
    assert info.value.exit_code == 64


@pytest.mark.usefixtures("compiled")
@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: torch.ops.mpirun_kit.nms(torch.zeros(3, 5), torch.zeros(3), 0.5), r"boxes must be \[N, 4\], got \[3, 5\]"),
        (lambda: torch.ops.mpirun_kit.nms(B, torch.zeros(3), 0.5), r"scores must be \[N\] with N = 2 \(the rows of boxes\), got \[3\]"),
        (lambda: torch.ops.mpirun_kit.nms(B.half(), torch.zeros(2).half(), 0.5), r"boxes has dtype Half, which the cpu kernels do not support"),
        (lambda: torch.ops.mpirun_kit.batched_nms(B, torch.zeros(2), torch.zeros(2), 0.5), r"idxs must be an integer tensor \(a group id per box\), got dtype Float"),
        (lambda: torch.ops.mpirun_kit.batched_nms(B, torch.zeros(2), torch.zeros(2, dtype=torch.int64), 0.5, -2),
         r"max_keep must be >= 0 \(how many kept boxes to return\), or -1 for all; got -2"),
        (lambda: torch.ops.mpirun_kit.box_iou(B, B.double()), r"a and b must have one dtype, got Float and Double"),
        (lambda: torch.ops.mpirun_kit.encode_boxes(B, B, [1.0, 1.0]), r"weights must be 4 floats \(wx, wy, ww, wh\), got 2 values"),
        (lambda: torch.ops.mpirun_kit.decode_boxes(torch.zeros(2, 6), B, [1.0] * 4, 1.0), r"deltas must be \[N, 4\*K\] \(4 values per class\), got \[2, 6\]"),
        (lambda: torch.ops.mpirun_kit.grid_anchors(B, 2, 2, 0), r"stride must be > 0, got 0"),
        (lambda: torch.ops.mpirun_kit.roi_align(torch.zeros(1, 3, 4, 4), torch.tensor([[2.0, 0, 0, 2, 2]]), 1.0, 2, 2, 0, True), r"rois\[:, 0\] must be batch indices in \[0, 0\], got values in \[2, 2\]"),
        (lambda: torch.ops.mpirun_kit.roi_align(torch.zeros(1, 3, 4, 4), torch.zeros(1, 4), 1.0, 2, 2, 0, True), r"rois must be \[N, 5\], got \[1, 4\]"),
        (lambda: torch.ops.mpirun_kit._roi_align_backward(torch.zeros(1, 3, 2, 2), torch.zeros(2, 5), 1.0, 2, 2, 1, 3, 4, 4, 0, True), r"grad must be \[K, C, oh, ow\] = \[2, 3, 2, 2\], got \[1, 3, 2, 2\]"),
        (lambda: torch.ops.mpirun_kit.generate_proposals(B, torch.zeros(1, 2), torch.zeros(1, 2, 4), torch.zeros(2, 2), None, 5, 5, 0.7, 0.0, [1.0] * 4, 1.0), r"image_sizes must be \[B, 2\] = \[1, 2\] rows of \(h, w\), got \[2, 2\]"),
    ],
)
def test_kernel_checks_name_the_value(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# ------------------------------------------------------------ fallback
def test_bogus_library_path_keeps_the_original_error(tmp_path):
    loader = _loader.ExtensionLoader(tmp_path / "missing" / "_C.so")
    err = loader.load()
    assert isinstance(err, OSError) and "missing/_C.so" in str(err)
    assert loader.load() is err  # loaded (and failed) once, remembered
    assert not loader.available
    with pytest.raises(ops.OpsUnavailableError, match=r"could not load the compiled extension .*missing/_C.so: OSError: .*python setup.py build_ext --inplace") as info:
        loader.require()
    assert info.value.__cause__ is err


def test_not_a_library_reports_the_dlopen_error(tmp_path):
    fake = tmp_path / "_C.so"
    fake.write_text("not an ELF file\n" * 256)  # long enough that dlopen reads the header
    err = _loader.ExtensionLoader(fake).load()
    assert isinstance(err, OSError)
    assert "invalid ELF header" in _loader.ExtensionLoader(fake).fallback_message()  # the dlopen reason, from the chained cause


def test_unbuilt_extension_says_how_to_build():
    loader = _loader.ExtensionLoader(None)
    assert "FileNotFoundError: no mpirun_kit/maskrcnn/_C*.so next to the package (the extension was never built)" in loader.fallback_message()
    assert "python setup.py build_ext --inplace" in loader.fallback_message()


def test_fallback_warns_once_with_the_load_error_and_still_computes(gen, tmp_path):
    boxes = rand_boxes(gen, 40)
    scores = torch.rand(40, generator=gen)
    inp = torch.randn(1, 2, 8, 8, generator=gen)
    rois = rand_rois(gen, 4, 1, 8.0)
    with _loader.using(_loader.ExtensionLoader(tmp_path / "nope.so")) as loader:
        with pytest.warns(ops.OpsFallbackWarning, match=r"could not load the compiled extension .*nope.so: OSError: .*falling back to the pure-PyTorch references") as rec:
            kept = ops.nms(boxes, scores, 0.5)
        assert len(rec) == 1
        assert rec[0].filename == __file__  # points at the caller, not at the wrappers
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second fallback must stay silent
            pooled = ops.roi_align(inp, rois, 2, 1.0, 2, True)
        assert not ops.ops_available()
        assert ops.load_error() is loader.load()
    assert torch.equal(kept, reference.nms(boxes, scores, 0.5))
    torch.testing.assert_close(pooled, reference.roi_align(inp, rois, (2, 2), 1.0, 2, True))


def test_boxes_to_rois_prefixes_the_image_index():
    rois = ops.boxes_to_rois([B, B[:1]])
    assert rois.tolist() == [[0, 0, 0, 4, 4], [0, 1, 1, 5, 5], [1, 0, 0, 4, 4]]


def test_box_ops_stay_differentiable(gen):
    # The compiled box ops have no backward; with grad required the wrappers use the references.
    a = rand_boxes(gen, 5).requires_grad_(True)
    ops.box_iou(a, rand_boxes(gen, 3)).sum().backward()
    d = torch.randn(5, 4, generator=gen, requires_grad=True)
    ops.decode_boxes(d, rand_boxes(gen, 5)).sum().backward()
    assert a.grad is not None and d.grad is not None
