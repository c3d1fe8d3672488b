"""CUDA kernels against the references and torchvision.ops (GPU hosts only).

Skipped where no GPU is visible (this development machine has none); on a GPU
host with a CUDA build of the extension they compare every CUDA kernel with the
pure-PyTorch reference run in float32/float64 on the same inputs, and nms and
roi_align with torchvision.ops when torchvision is importable.  Half and
bfloat16 are compared against a float32 reference on the rounded inputs, with
tolerances for the output rounding (the kernels accumulate in float32).
"""
from __future__ import annotations

import pytest
import torch

from mpirun_kit.maskrcnn import ops
from mpirun_kit.maskrcnn.ops import reference

from ops_inputs import rand_boxes, rand_rois

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.usefixtures("compiled"),
]
M = torch.ops.mpirun_kit
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def tol(dtype):
    return {
        torch.float64: {"rtol": 1e-10, "atol": 1e-10},
        torch.float32: {"rtol": 1e-5, "atol": 1e-5},
        torch.float16: {"rtol": 1e-2, "atol": 1e-2},
        torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
    }[dtype]


@pytest.fixture(autouse=True)
def cuda_kernels_built(compiled):
    # the dispatcher knows mpirun_kit::nms only once the library is loaded: load it first (asking
    # before that raised "operator mpirun_kit::nms does not exist" in every test on the first GPU run)
    ops.ops_available()
    if not torch._C._dispatch_has_kernel_for_dispatch_key("mpirun_kit::nms", "CUDA"):
        pytest.fail("the extension was built without CUDA kernels; rebuild on this GPU host: python setup.py build_ext --inplace")


def _oracle_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


@pytest.mark.parametrize("n", [0, 1, 700, 5000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nms_cuda_matches_reference(gen, n, dtype):
    boxes = rand_boxes(gen, n, size=300.0, dtype=dtype)
    scores = torch.rand(n, generator=gen, dtype=torch.float64).to(dtype)
    got = M.nms(boxes.cuda(), scores.cuda(), 0.5).cpu()
    assert torch.equal(got, reference.nms(boxes, scores, 0.5))
    idxs = torch.randint(0, 4, (n,), generator=gen)
    got = M.batched_nms(boxes.cuda(), scores.cuda(), idxs.cuda(), 0.5).cpu()
    assert torch.equal(got, reference.batched_nms(boxes, scores, idxs, 0.5))
    for k in (0, 1, n // 3, n + 1):  # max_keep: the head of the full result
        assert torch.equal(M.batched_nms(boxes.cuda(), scores.cuda(), idxs.cuda(), 0.5, k).cpu(), got[:k])


def test_nms_cuda_identical_boxes():
    boxes = torch.tensor([[1.0, 1.0, 9.0, 9.0]]).repeat(130, 1).cuda()
    assert M.nms(boxes, torch.ones(130, device="cuda"), 0.5).tolist() == [0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nms_cuda_half_keeps_about_the_same_boxes(gen, dtype):
    boxes = rand_boxes(gen, 800, size=300.0).to(dtype)
    scores = torch.rand(800, generator=gen).to(dtype)
    got = set(M.nms(boxes.cuda(), scores.cuda(), 0.5).cpu().tolist())
    want = set(reference.nms(boxes.float(), scores.float(), 0.5).tolist())
    assert len(got ^ want) <= 0.02 * len(want)  # near-threshold IoUs may round either way


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("channels_last", [False, True])
def test_roi_align_cuda_matches_reference(gen, dtype, aligned, sampling_ratio, channels_last):
    inp = torch.randn(2, 6, 14, 17, generator=gen).to(dtype)
    rois = rand_rois(gen, 12, 2, 16.0).to(dtype)
    rois[0, 1:] = torch.tensor([5.0, 5.0, 5.0, 5.0])
    x = inp.cuda()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    got = ops.roi_align(x, rois.cuda(), (3, 4), 0.8, sampling_ratio, aligned)
    od = _oracle_dtype(dtype)
    ref_in = inp.to(od).requires_grad_(True)
    want = reference.roi_align(ref_in, rois.to(od), (3, 4), 0.8, sampling_ratio, aligned)
    torch.testing.assert_close(got.cpu().to(od), want, **tol(dtype))
    upstream = torch.randn(want.shape, generator=gen).to(dtype)
    got.backward(upstream.cuda())
    want.backward(upstream.to(od))
    torch.testing.assert_close(x.grad.cpu().to(od), ref_in.grad, **tol(dtype))


def test_roi_align_cuda_gradcheck(gen):
    # drawn with the test's (CPU) generator, then moved: a CPU generator cannot fill a CUDA tensor
    inp = torch.randn(1, 2, 6, 7, generator=gen, dtype=torch.float64).cuda().requires_grad_(True)
    rois = rand_rois(gen, 3, 1, 6.0, torch.float64).cuda()
    assert torch.autograd.gradcheck(lambda t: ops.roi_align(t, rois, (2, 3), 1.0, 2, True), (inp,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_box_ops_cuda_match_reference(gen, dtype):
    a, b = rand_boxes(gen, 40).to(dtype), rand_boxes(gen, 25).to(dtype)
    od = _oracle_dtype(dtype)
    torch.testing.assert_close(M.box_iou(a.cuda(), b.cuda()).cpu().to(od), reference.box_iou(a.to(od), b.to(od)), **tol(dtype))
    w = [10.0, 10.0, 5.0, 5.0]
    torch.testing.assert_close(
        M.encode_boxes(a.cuda(), b[:1].expand(40, 4).contiguous().cuda(), w).cpu().to(od),
        reference.encode_boxes(a.to(od), b[:1].expand(40, 4).to(od), w), **tol(dtype))
    d = (torch.randn(40, 8, generator=gen) * 0.5).to(dtype)
    torch.testing.assert_close(
        M.decode_boxes(d.cuda(), a.cuda(), w, reference.DEFAULT_CLIP).cpu().to(od),
        reference.decode_boxes(d.to(od), a.to(od), w), **tol(dtype))
    cell = reference.cell_anchors((32, 64), (0.5, 1.0, 2.0), dtype)
    assert torch.equal(M.grid_anchors(cell.cuda(), 5, 6, 8).cpu(), reference.grid_anchors(cell, 5, 6, 8))


@pytest.mark.parametrize("per_level", [False, True])
def test_generate_proposals_cuda_matches_reference(gen, per_level):
    sizes = [(16, 20), (8, 10), (4, 5)]
    per = ops.generate_anchors(sizes, [4, 8, 16], ((32,), (64,), (128,)), (0.5, 1.0, 2.0))
    levels = torch.cat([torch.full((len(a),), i) for i, a in enumerate(per)]) if per_level else None
    anchors = torch.cat(per)
    obj = torch.randn(2, anchors.shape[0], generator=gen)
    deltas = torch.randn(2, anchors.shape[0], 4, generator=gen) * 0.3
    args = ([(64, 80), (50, 61)], ops.ProposalParams(300, 100, 0.7, 2.0))
    got_b, got_s = ops.generate_proposals(anchors.cuda(), obj.cuda(), deltas.cuda(), *args,
                                          levels=levels.cuda() if per_level else None)
    want_b, want_s = reference.generate_proposals(anchors, obj, deltas, *args, levels)
    for gb, gs, wb, ws in zip(got_b, got_s, want_b, want_s):
        torch.testing.assert_close(gs.cpu(), ws)
        torch.testing.assert_close(gb.cpu(), wb, rtol=1e-5, atol=1e-4)


def test_cuda_kernels_agree_with_torchvision(gen):
    torchvision = pytest.importorskip("torchvision")
    boxes = rand_boxes(gen, 3000, size=500.0).cuda()
    scores = torch.rand(3000, generator=gen).cuda()
    assert torch.equal(M.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5))
    idxs = torch.randint(0, 5, (3000,), generator=gen).cuda()
    assert set(M.batched_nms(boxes, scores, idxs, 0.5).tolist()) == set(torchvision.ops.batched_nms(boxes, scores, idxs, 0.5).tolist())
    feat = torch.randn(2, 8, 30, 40, generator=gen).cuda()
    rois = rand_rois(gen, 50, 2, 120.0).cuda()
    for aligned in (False, True):
        for sr in (0, 2):
            torch.testing.assert_close(
                M.roi_align(feat, rois, 0.25, 7, 7, sr, aligned), torchvision.ops.roi_align(feat, rois, 7, 0.25, sr, aligned))


@pytest.mark.parametrize("per_level", [False, True])
def test_generate_proposals_padded_cuda_matches_cpu_without_syncing(gen, per_level):
    sizes = [(16, 20), (8, 10), (4, 5)]
    per = ops.generate_anchors(sizes, [4, 8, 16], ((32,), (64,), (128,)), (0.5, 1.0, 2.0))
    level_sizes = [len(a) for a in per] if per_level else []
    anchors = torch.cat(per)
    obj = torch.randn(3, anchors.shape[0], generator=gen)
    deltas = torch.randn(3, anchors.shape[0], 4, generator=gen) * 0.3
    args = ([(64, 80), (50, 61), (64, 40)], ops.ProposalParams(300, 100, 0.7, 2.0), level_sizes)
    want = ops.generate_proposals_padded(anchors, obj, deltas, *args)
    on_gpu = [anchors.cuda(), obj.cuda(), deltas.cuda()]  # the copies before the window: each one syncs
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any device -> host read inside raises
    try:
        got = ops.generate_proposals_padded(*on_gpu, *args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(got[2].cpu(), want[2])
    torch.testing.assert_close(got[1].cpu(), want[1])
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_packed_multiscale_roi_align_cuda_forward_backward(gen, dtype, channels_last):
    n, c, img_h, img_w = 2, 4, 256, 384
    feats = [torch.randn(n, c, img_h // s, img_w // s, generator=gen).to(dtype) for s in (4, 8, 16, 32)]
    xy = torch.rand(64, 2, generator=gen) * torch.tensor([img_w, img_h])
    wh = torch.rand(64, 2, generator=gen) ** 2 * torch.tensor([img_w, img_h])
    b = torch.cat([xy, xy + wh], 1)
    b[:, 0::2] = b[:, 0::2].clamp(0, img_w)
    b[:, 1::2] = b[:, 1::2].clamp(0, img_h)
    rois = torch.cat([torch.randint(0, n, (64, 1), generator=gen).float(), b], 1).to(dtype)
    od = _oracle_dtype(dtype)
    ref_feats = [f.to(od).requires_grad_(True) for f in feats]
    want = ops.multiscale_roi_align(ref_feats, rois.to(od), 7, 2, [4, 8, 16, 32], aligned=True)
    cuda_feats = [f.cuda() for f in feats]
    if channels_last:
        cuda_feats = [f.contiguous(memory_format=torch.channels_last) for f in cuda_feats]
    cuda_feats = [f.requires_grad_(True) for f in cuda_feats]
    upstream = torch.randn(want.shape, generator=gen).to(dtype)
    cuda_rois, cuda_upstream = rois.cuda(), upstream.cuda()  # host -> device copies stay outside the window
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = ops.multiscale_roi_align_packed(cuda_feats, cuda_rois, 7, 2, [4, 8, 16, 32])
        got.backward(cuda_upstream)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    want.backward(upstream.to(od))
    t = tol(dtype) if dtype != torch.float32 else {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(got.detach().cpu().to(od), want.detach(), **t)
    for gf, rf in zip(cuda_feats, ref_feats):
        torch.testing.assert_close(gf.grad.cpu().to(od), rf.grad, **{k: v * 10 for k, v in t.items()})


def test_training_step_passes_sync_debug_mode_error(tmp_path):
    """One full training step of the GPU preset (bf16, channels-last) with set_sync_debug_mode("error")."""
    from mpirun_kit.maskrcnn.dist import DistInfo
    from mpirun_kit.maskrcnn.train import Trainer, build_parser

    sys_path = __import__("sys").path
    sys_path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "benchmarks"))
    from bench_maskrcnn_gpu import synthetic_batch

    args = build_parser().parse_args(["--config", "r50_fpn_1x", "--data-dir", str(tmp_path), "--output-dir",
                                      str(tmp_path / "out"), "--set", "model.backbone.weights="])
    t = Trainer(args, DistInfo(0, 1, 0, 1))
    t._setup_runtime()
    t._build_model()
    from mpirun_kit.maskrcnn.data.batch import collate

    # as the trainer's loader hands it over: collated and pinned (the step's copy is then asynchronous)
    batch = collate(synthetic_batch(4, 512, 853, 80, torch.Generator().manual_seed(0)), 32)
    batch = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    t.train_step(batch)  # warm-up: cuDNN autotuning and the anchor cache may sync once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses, window = t.train_step(batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert window.is_cuda and bool(torch.isfinite(window).all()), window  # the step ran and its losses are real
    assert {"loss_rpn_cls", "loss_rpn_box", "loss_cls", "loss_box_reg", "loss_mask"} <= set(losses), sorted(losses)


_BAD_BATCH_CALLS = {
    "forward": "torch.ops.mpirun_kit.roi_align(x, rois, 1.0, 2, 2, 2, True)",
    "backward": "torch.ops.mpirun_kit._roi_align_backward(g, rois, 1.0, 2, 2, 2, 3, 8, 8, 2, True)",
    "deterministic backward": "torch.use_deterministic_algorithms(True); "
                              "torch.ops.mpirun_kit._roi_align_backward(g, rois, 1.0, 2, 2, 2, 3, 8, 8, 2, True)",
}


@pytest.mark.parametrize("call", sorted(_BAD_BATCH_CALLS))
def test_roi_align_cuda_bad_batch_index_raises(call):
    """A RoI with batch index >= N is a device-side assert naming the rule, not an out-of-bounds
    read or write.  Run in a child process: a device-side assert leaves the CUDA context unusable."""
    import subprocess
    import sys
    from pathlib import Path

    script = "\n".join([
        "import torch",
        "from mpirun_kit.maskrcnn import ops",
        "ops.ops_available()",
        "x = torch.randn(2, 3, 8, 8, device='cuda')",
        "g = torch.ones(2, 3, 2, 2, device='cuda')",
        "rois = torch.tensor([[0.0, 1, 1, 5, 5], [2.0, 1, 1, 5, 5]], device='cuda')",
        _BAD_BATCH_CALLS[call],
        "torch.cuda.synchronize()",
    ])
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "device-side assert" in proc.stderr, proc.stderr
    assert "rois[:, 0] must be batch indices in [0, N - 1]" in proc.stdout + proc.stderr


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_roi_align_cuda_deterministic_backward_is_bitwise_repeatable(gen, dtype, channels_last):
    """torch.use_deterministic_algorithms(True) selects the backward without atomics: two runs give
    the same bits, and the result is the atomic path's up to the order of float additions."""
    x = torch.randn(3, 16, 40, 52, generator=gen).to(dtype).cuda()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    # many overlapping RoIs, so atomics on one cell race
    rois = rand_rois(gen, 300, 3, 40.0).to(dtype).cuda()
    grad = torch.randn(300, 16, 7, 7, generator=gen).to(dtype).cuda()
    args = (rois, 0.5, 7, 7, 3, 16, 40, 52, 2, True)
    fast = M._roi_align_backward(grad, *args)
    torch.use_deterministic_algorithms(True)
    try:
        first = M._roi_align_backward(grad, *args)
        second = M._roi_align_backward(grad, *args)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(first, second)
    # the op sees the gradient and the RoIs, never the input: its result is in the default layout
    # whatever the forward's input was (autograd takes either layout)
    assert first.dtype == dtype and first.is_contiguous()
    torch.testing.assert_close(first.float(), fast.float(), **{k: v * 10 for k, v in tol(dtype).items()})
    od = _oracle_dtype(dtype)
    xr = x.detach().cpu().to(od).requires_grad_(True)
    reference.roi_align(xr, rois.cpu().to(od), (7, 7), 0.5, 2, True).backward(grad.cpu().to(od))
    torch.testing.assert_close(first.cpu().to(od), xr.grad, **{k: v * 10 for k, v in tol(dtype).items()})


@pytest.mark.parametrize("images", [1, 5])
@pytest.mark.parametrize("pre", [100, 300])
def test_per_image_nms_masks_match_the_cpu_kernel(gen, images, pre):
    """The proposal step's NMS builds one suppression bitmask per image (segments not a multiple of
    64 boxes included); every image keeps what the CPU kernel keeps."""
    sizes = [(16, 20), (8, 10), (4, 5)]
    per = ops.generate_anchors(sizes, [4, 8, 16], ((32,), (64,), (128,)), (0.5, 1.0, 2.0))
    anchors = torch.cat(per)
    obj = torch.randn(images, anchors.shape[0], generator=gen)
    deltas = torch.randn(images, anchors.shape[0], 4, generator=gen) * 0.3
    args = ([(64, 80)] * images, ops.ProposalParams(pre, 150, 0.6, 1.0), [len(a) for a in per])
    want = ops.generate_proposals_padded(anchors, obj, deltas, *args)
    got = ops.generate_proposals_padded(anchors.cuda(), obj.cuda(), deltas.cuda(), *args)
    torch.testing.assert_close(got[2].cpu(), want[2])
    torch.testing.assert_close(got[1].cpu(), want[1])
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-5, atol=1e-4)


def test_roi_align_under_cuda_autocast_runs_in_float32(gen):
    x = torch.randn(2, 8, 20, 24, generator=gen).cuda().to(torch.bfloat16).requires_grad_(True)
    rois = rand_rois(gen, 10, 2, 20.0).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = ops.roi_align(x, rois, 7, 1.0, 2, True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, M.roi_align(x.detach().float(), rois, 1.0, 7, 7, 2, True))
    out.sum().backward()
    assert x.grad.dtype == torch.bfloat16
