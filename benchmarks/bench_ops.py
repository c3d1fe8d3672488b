"""Benchmark of the detection ops: compiled kernels against a baseline measured in the same run.

CPU (default): each compiled CPU kernel against its pure-PyTorch reference
(mpirun_kit/maskrcnn/ops/reference.py) on the same inputs, at realistic sizes:
NMS over 1k / 10k / 100k boxes; roi_align of 512 RoIs x 256 channels over a
2 x 256 x 200 x 336 map (FPN P2 of an 800 x 1344 image), forward and
forward+backward; box_iou, decode_boxes and the fused proposal step.  The target is
>= 5x.  A reference that would take longer than ``--budget`` seconds is run in a
child process that is stopped at the budget; the ratio is then reported as a
lower bound (">=").

CUDA (``--device cuda``, needs a GPU and torchvision): the compiled CUDA kernels
against torchvision.ops on the same inputs (nms, roi_align forward+backward), and
the fused proposal step against the same pipeline built from separate
torchvision ops.  Targets: >= 1.0x for nms and roi_align, >= 2x for proposals.  A last
row prices the deterministic RoIAlign backward (torch.use_deterministic_algorithms) against
the default atomic one (no target: below 1x is expected).

    python benchmarks/bench_ops.py                 # CPU table
    python benchmarks/bench_ops.py --json          # machine-readable
    python benchmarks/bench_ops.py --device cuda   # on a GPU host

Baseline and compiled runs alternate and the speed-up is the median of the
per-pair ratios, so load on a shared machine hits both sides; absolute times
(medians) are printed for context only.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass(frozen=True)
class Row:
    """One benchmark line: the op, its size, both timings and their ratio."""

    op: str
    size: str
    baseline: str
    baseline_s: float | None  # None when the baseline ran past the budget
    compiled_s: float
    ratio: float
    lower_bound: bool = False  # True: the baseline was stopped at the budget, ratio is ">="


def _median_time(fn, repeats: int, sync=lambda: None) -> float:
    fn()  # warm-up (allocations, first-call dispatch, lazy load)
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _compare(baseline, compiled, repeats: int, sync=lambda: None) -> tuple[float, float, float]:
    """(baseline s, compiled s, speed-up): medians over interleaved runs.

    The two run alternately, so a load spike on this shared machine hits both
    sides of a pair; the speed-up is the median of the per-pair ratios.
    """
    baseline()
    compiled()
    sync()
    tb, tc, ratios = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        baseline()
        sync()
        t1 = time.perf_counter()
        compiled()
        sync()
        t2 = time.perf_counter()
        tb.append(t1 - t0)
        tc.append(t2 - t1)
        ratios.append((t1 - t0) / (t2 - t1))
    return statistics.median(tb), statistics.median(tc), statistics.median(ratios)


def _boxes(n: int, seed: int, device="cpu", dtype=None):
    import torch

    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 1000
    wh = torch.rand(n, 2, generator=g) * 90 + 10
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.rand(n, generator=g)
    return boxes.to(device, dtype or torch.float32), scores.to(device, dtype or torch.float32)


def _roi_inputs(seed: int, device="cpu", k=512, c=256, h=200, w=336):
    import torch

    g = torch.Generator().manual_seed(seed)
    feat = torch.randn(2, c, h, w, generator=g)
    xy = torch.rand(k, 2, generator=g) * torch.tensor([w * 4 * 0.8, h * 4 * 0.8])
    wh = torch.rand(k, 2, generator=g) * 200 + 8
    rois = torch.cat([torch.randint(0, 2, (k, 1), generator=g).float(), xy, xy + wh], 1)
    return feat.to(device), rois.to(device)


def _proposal_inputs(seed: int, device="cpu"):
    import torch

    from mpirun_kit.maskrcnn import ops

    g = torch.Generator().manual_seed(seed)
    sizes = [(200, 336), (100, 168), (50, 84), (25, 42), (13, 21)]
    per_level = ops.generate_anchors(sizes, [4, 8, 16, 32, 64], ((32,), (64,), (128,), (256,), (512,)), (0.5, 1.0, 2.0), device)
    levels = torch.cat([torch.full((len(a),), i, device=device) for i, a in enumerate(per_level)])
    anchors = torch.cat(per_level)
    obj = torch.randn(2, anchors.shape[0], generator=g).to(device)
    deltas = (torch.randn(2, anchors.shape[0], 4, generator=g) * 0.2).to(device)
    return anchors, obj, deltas, levels, [(800, 1333), (800, 1200)]


def _reference_nms_child(n: int, seed: int) -> None:
    """Entry of the budget-limited child: time one reference NMS and print it."""
    from mpirun_kit.maskrcnn.ops import reference

    boxes, scores = _boxes(n, seed)
    t0 = time.perf_counter()
    reference.nms(boxes, scores, 0.5)
    print(time.perf_counter() - t0)


def _reference_nms_with_budget(n: int, seed: int, budget: float) -> float | None:
    """Seconds of one reference NMS in a child process, or None if it ran past ``budget``."""
    argv = [sys.executable, __file__, "--_reference-nms", str(n), str(seed)]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=budget + 30, check=True)
    except subprocess.TimeoutExpired:
        return None
    seconds = float(out.stdout.strip().splitlines()[-1])
    return seconds if seconds <= budget else None


def bench_cpu(repeats: int, budget: float, seed: int) -> list[Row]:
    import torch

    from mpirun_kit.maskrcnn import ops
    from mpirun_kit.maskrcnn.ops import reference

    ops._loader.active().require()
    M = torch.ops.mpirun_kit
    rows: list[Row] = []
    for n in (1_000, 10_000, 100_000):
        boxes, scores = _boxes(n, seed)
        if n <= 10_000:
            t_r, t_c, ratio = _compare(lambda: reference.nms(boxes, scores, 0.5), lambda: M.nms(boxes, scores, 0.5), repeats if n < 10_000 else 2)
            rows.append(Row("nms", f"{n:,} boxes", "reference", t_r, t_c, ratio))
        else:
            t_c = _median_time(lambda: M.nms(boxes, scores, 0.5), 3)
            t_r = _reference_nms_with_budget(n, seed, budget)
            rows.append(Row("nms", f"{n:,} boxes", "reference", t_r, t_c, (t_r or budget) / t_c, t_r is None))

    feat, rois = _roi_inputs(seed)
    size = "512 RoIs x 256 ch, 2x200x336, 7x7, s=2"
    t_r, t_c, ratio = _compare(
        lambda: reference.roi_align(feat, rois, (7, 7), 0.25, 2, True), lambda: M.roi_align(feat, rois, 0.25, 7, 7, 2, True), repeats
    )
    rows.append(Row("roi_align fwd", size, "reference", t_r, t_c, ratio))

    def fwd_bwd(fn):
        x = feat.detach().requires_grad_(True)
        fn(x).sum().backward()

    t_r, t_c, ratio = _compare(
        lambda: fwd_bwd(lambda x: reference.roi_align(x, rois, (7, 7), 0.25, 2, True)),
        lambda: fwd_bwd(lambda x: ops.roi_align(x, rois, 7, 0.25, 2, True)),
        repeats,
    )
    rows.append(Row("roi_align fwd+bwd", size, "reference", t_r, t_c, ratio))

    cl = feat.contiguous(memory_format=torch.channels_last)
    t_r, t_c, ratio = _compare(
        lambda: reference.roi_align(cl, rois, (7, 7), 0.25, 2, True), lambda: M.roi_align(cl, rois, 0.25, 7, 7, 2, True), repeats
    )
    rows.append(Row("roi_align fwd, channels-last", size, "reference", t_r, t_c, ratio))

    a, _ = _boxes(2000, seed)
    b, _ = _boxes(300, seed + 1)
    t_r, t_c, ratio = _compare(lambda: reference.box_iou(a, b), lambda: M.box_iou(a, b), repeats * 4)
    rows.append(Row("box_iou", "2000 x 300", "reference", t_r, t_c, ratio))

    g = torch.Generator().manual_seed(seed)
    props, _ = _boxes(100_000, seed)
    deltas = torch.randn(100_000, 4, generator=g)
    w = [1.0, 1.0, 1.0, 1.0]
    t_r, t_c, ratio = _compare(
        lambda: reference.decode_boxes(deltas, props, w), lambda: M.decode_boxes(deltas, props, w, reference.DEFAULT_CLIP), repeats * 4
    )
    rows.append(Row("decode_boxes", "100,000 boxes", "reference", t_r, t_c, ratio))

    anchors, obj, dl, levels, sizes = _proposal_inputs(seed)
    args = (anchors, obj, dl, sizes, ops.ProposalParams(2000, 1000, 0.7, 1e-3))
    t_r, t_c, ratio = _compare(
        lambda: reference.generate_proposals(*args, levels=levels), lambda: ops.generate_proposals(*args, levels=levels), max(1, repeats // 2)
    )
    rows.append(Row("generate_proposals", f"2 images, {anchors.shape[0]:,} anchors, 2000/level -> 1000", "reference", t_r, t_c, ratio))
    return rows


def bench_cuda(repeats: int, seed: int) -> list[Row]:
    import torch
    import torchvision  # GPU hosts with CUDA torch have it
    from torchvision.models.detection._utils import BoxCoder
    from torchvision.ops import boxes as box_ops

    from mpirun_kit.maskrcnn import ops

    ops._loader.active().require()
    sync = torch.cuda.synchronize
    M = torch.ops.mpirun_kit
    rows: list[Row] = []
    for n in (1_000, 10_000, 100_000):
        boxes, scores = _boxes(n, seed, "cuda")
        t_t, t_c, ratio = _compare(lambda: torchvision.ops.nms(boxes, scores, 0.5), lambda: M.nms(boxes, scores, 0.5), repeats, sync)
        rows.append(Row("nms", f"{n:,} boxes", "torchvision", t_t, t_c, ratio))
    feat, rois = _roi_inputs(seed, "cuda")
    size = "512 RoIs x 256 ch, 2x200x336, 7x7, s=2"
    for dtype in (torch.float32, torch.float16):
        f, r = feat.to(dtype), rois.to(dtype)

        def fwd_bwd(fn):
            x = f.detach().requires_grad_(True)
            fn(x).float().sum().backward()

        t_t, t_c, ratio = _compare(
            lambda: fwd_bwd(lambda x: torchvision.ops.roi_align(x, r, 7, 0.25, 2, True)),
            lambda: fwd_bwd(lambda x: M.roi_align(x, r, 0.25, 7, 7, 2, True)),
            repeats,
            sync,
        )
        rows.append(Row(f"roi_align fwd+bwd {str(dtype).replace('torch.', '')}", size, "torchvision", t_t, t_c, ratio))

    anchors, obj, dl, levels, sizes = _proposal_inputs(seed, "cuda")
    coder = BoxCoder((1.0, 1.0, 1.0, 1.0))

    def torchvision_pipeline():
        # The torchvision RPN's filter_proposals, op by op.
        out = []
        for i, (h, w) in enumerate(sizes):
            sel = torch.cat([
                torch.nonzero(levels == lvl).flatten()[obj[i, levels == lvl].topk(min(2000, int((levels == lvl).sum()))).indices]
                for lvl in range(5)
            ])
            bx = coder.decode_single(dl[i, sel], anchors[sel])
            bx = box_ops.clip_boxes_to_image(bx, (h, w))
            keep = box_ops.remove_small_boxes(bx, 1e-3)
            bx, sc, lv = bx[keep], obj[i, sel][keep], levels[sel][keep]
            keep = box_ops.batched_nms(bx, sc, lv, 0.7)[:1000]
            out.append(bx[keep])
        return out

    t_t, t_c, ratio = _compare(
        torchvision_pipeline, lambda: ops.generate_proposals(anchors, obj, dl, sizes, ops.ProposalParams(2000, 1000, 0.7, 1e-3), levels=levels), repeats, sync
    )
    rows.append(Row("generate_proposals", f"2 images, {anchors.shape[0]:,} anchors", "torchvision ops", t_t, t_c, ratio))
    # the training step's sync-free variant against the list op above (which waits per level and image)
    level_sizes = [int((levels == lvl).sum()) for lvl in range(5)]
    t_t, t_c, ratio = _compare(
        lambda: ops.generate_proposals(anchors, obj, dl, sizes, ops.ProposalParams(2000, 1000, 0.7, 1e-3), levels=levels),
        lambda: ops.generate_proposals_padded(anchors, obj, dl, sizes, ops.ProposalParams(2000, 1000, 0.7, 1e-3), level_sizes), repeats, sync
    )
    rows.append(Row("generate_proposals_padded", f"2 images, {anchors.shape[0]:,} anchors", "generate_proposals", t_t, t_c, ratio))
    # the packed FPN pooler (one roi_align call, no sync) against the per-level split (nonzero per level)
    feats = [torch.randn(4, 256, 200 // f, 336 // f, device="cuda") for f in (1, 2, 4, 8)]
    feats = [f.contiguous(memory_format=torch.channels_last).requires_grad_(True) for f in feats]
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(2048, 2, generator=g) * torch.tensor([1000.0, 600.0])
    boxes = torch.cat([xy, xy + torch.rand(2048, 2, generator=g) * 300 + 8], 1).clamp(max=799)
    rois = torch.cat([torch.randint(0, 4, (2048, 1), generator=g).float(), boxes], 1).cuda()

    def fwd_bwd(fn):
        return lambda: fn().sum().backward()

    t_t, t_c, ratio = _compare(
        fwd_bwd(lambda: ops.multiscale_roi_align(feats, rois, 7, 2, [4, 8, 16, 32], aligned=True)),
        fwd_bwd(lambda: ops.multiscale_roi_align_packed(feats, rois, 7, 2, [4, 8, 16, 32])), repeats, sync
    )
    rows.append(Row("multiscale_roi_align_packed fwd+bwd", "2048 RoIs x 256 ch, P2-P5 of 4x800x1344, channels-last",
                    "multiscale_roi_align", t_t, t_c, ratio))
    # what the deterministic RoIAlign backward (no atomics) costs against the default atomic one
    packed = fwd_bwd(lambda: ops.multiscale_roi_align_packed(feats, rois, 7, 2, [4, 8, 16, 32]))

    def deterministic():
        torch.use_deterministic_algorithms(True)
        try:
            packed()
        finally:
            torch.use_deterministic_algorithms(False)

    t_t, t_c, ratio = _compare(packed, deterministic, repeats, sync)
    rows.append(Row("multiscale_roi_align_packed fwd+bwd, deterministic", "as above", "atomic backward", t_t, t_c, ratio))
    return rows


def render(rows: list[Row], device: str, threads: int) -> str:
    lines = [
        f"device: {device}, torch threads: {threads}",
        "",
        "| op | size | baseline | baseline ms | compiled ms | speed-up |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = "stopped at budget" if r.baseline_s is None else f"{r.baseline_s * 1e3:,.1f}"
        ratio = f"{'>= ' if r.lower_bound else ''}{r.ratio:,.1f}x"
        lines.append(f"| {r.op} | {r.size} | {r.baseline} | {base} | {r.compiled_s * 1e3:,.2f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu: kernels vs references; cuda: kernels vs torchvision")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case (median reported); default 5")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds a slow reference may run before it is stopped; default 60")
    parser.add_argument("--seed", type=int, default=0, help="input seed; default 0")
    parser.add_argument("--json", action="store_true", help="print rows as JSON instead of a table")
    parser.add_argument("--_reference-nms", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._reference_nms:
        _reference_nms_child(*args._reference_nms)
        return 0
    import torch

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("bench_ops: --device cuda needs a visible GPU and CUDA torch; this machine has neither", file=sys.stderr)
            return 64
        rows = bench_cuda(args.repeats, args.seed)
    else:
        rows = bench_cpu(args.repeats, args.budget, args.seed)
    if args.json:
        print(json.dumps({"device": args.device, "threads": torch.get_num_threads(), "rows": [asdict(r) for r in rows]}, indent=2))
    else:
        print(render(rows, args.device, torch.get_num_threads()))
    slow = [r for r in rows if r.ratio < (5.0 if args.device == "cpu" else 1.0)]
    if slow:
        print(f"below target: {', '.join(f'{r.op} ({r.size}) {r.ratio:.1f}x' for r in slow)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
