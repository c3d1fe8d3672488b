"""GPU training throughput of the real trainer: images/s per GPU, peak memory, host syncs per step.

What it measures is what ``python -m mpirun_kit.maskrcnn.train --config r50_fpn_1x`` runs on one GPU
of a p4d/p5 host: the trainer's own preset (bf16 autocast, channels-last, 4 images per GPU, cuDNN
autotuning), its model, optimizer and ``Trainer.train_step``, its DDP wrapping (a one-rank NCCL
group, so the gradient all-reduce hooks and buckets are in the step), and its data loader
(workers, pinned memory, aspect-ratio grouping) over a COCO-shaped synthetic set: JPEG images of
800x1333 with 3-12 polygon-annotated objects each, written once into ``--workdir``.

``--data coco-like`` uses issue #36's set instead: 640x480 photo-like JPEGs with 7 polygon objects
each (bench_loader.py's), resized by the preset like COCO's images.

Reported side by side, with the set they used: the loop's images/s per GPU (the trainer's loader
feeding ``train_step``) and the step's alone (one batch already on the GPU, stepped again and
again), each over windows of ``--window`` steps after ``--warmup`` steps (the median window and
every window, each bracketed by ``torch.cuda.synchronize()``); their ratio says how far the loader
holds the loop below its step.  Also peak GPU memory, the loader workers the trainer chose, and host
syncs per step measured two ways on one extra step: ``torch.cuda.set_sync_debug_mode("warn")``
warnings (what CUDA really saw) and the dispatch-level counter of mpirun_kit.maskrcnn.syncs (which
names file:line).  It fails hard (exit 70) when the compiled CUDA ops are not the active
implementation: timing the pure-PyTorch references would be a meaningless number.

    python benchmarks/bench_maskrcnn_gpu.py                       # r50_fpn_1x preset, 4 images/GPU
    python benchmarks/bench_maskrcnn_gpu.py --data coco-like      # issue #36's COCO-like set
    python benchmarks/bench_maskrcnn_gpu.py --set solver.amp=fp16 --set solver.ims_per_gpu=8
    python benchmarks/bench_maskrcnn_gpu.py --device cpu --size 128 --images 8 --warmup 1 --steps 2 --window 1   # smoke
    python benchmarks/bench_maskrcnn_gpu.py --cost [--cost-baseline model.roi_heads.mask_rois_per_image=0]

``--cost`` runs no GPU: it prints the step cost model of the same config (mpirun_kit/maskrcnn/cost.py:
FLOPs and bytes per image per component counted on the meta device, and an H100 roofline bound
next to the bar), with a "before" column for the config with ``--cost-baseline`` overrides.

Goal (issue #32): MLPerf-class, about 130 images/s per H100 (MLPerf Training v3.1: about 129 per
H100, 64 GPUs x 4 images, CUDA graphs; cost.GOAL_IMAGES_PER_S).  The earlier bar (issue #11) was 30
per H100; NVIDIA DLE with AMP gives ~26 per A100.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

#: the ops the training step runs on the device; each must have a compiled CUDA kernel
STEP_OPS = ("roi_align", "_roi_align_backward", "generate_proposals_padded", "box_iou", "encode_boxes",
            "decode_boxes", "grid_anchors")


class BenchError(Exception):
    """The benchmark cannot produce a meaningful number here (the message says why)."""


def cost_goal() -> float:
    """The img/s per GPU goal (cost.GOAL_IMAGES_PER_S, MLPerf-class), for the JSON results."""
    from mpirun_kit.maskrcnn.cost import GOAL_IMAGES_PER_S

    return GOAL_IMAGES_PER_S


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench_maskrcnn_gpu.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run of the same path (gloo)")
    p.add_argument("--config", default="r50_fpn_1x", choices=["r50_fpn_1x", "demo"],
                   help="the trainer preset (default r50_fpn_1x; demo: the small model, for a quick CPU smoke)")
    p.add_argument("--data", default="noise", choices=["noise", "coco-like"],
                   help="the set: noise = --size noise JPEGs, 3-12 objects (default); coco-like = 640x480 "
                        "photo-like JPEGs, 7 polygon objects, resized to 800 (issue #36)")
    p.add_argument("--size", type=int, default=800, help="noise set: image height; width is 1333/800 of it (default 800x1333)")
    p.add_argument("--images", type=int, default=64, help="synthetic training images to write (default 64)")
    p.add_argument("--warmup", type=int, default=20, help="steps before timing (cuDNN autotuning, allocator)")
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--window", type=int, default=20, help="steps per timing window")
    p.add_argument("--workdir", type=Path, default=None, help="keep the synthetic set here (default: a temp dir)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="trainer config override, as train.py's --set (e.g. solver.ims_per_gpu=8)")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    p.add_argument("--cost", action="store_true",
                   help="print the step cost model (FLOPs, bytes, H100 roofline) at --size; no GPU needed")
    p.add_argument("--cost-baseline", action="append", default=[], metavar="KEY=VALUE",
                   help="--cost: also count the config with this override, as a 'before' column")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    for name in ("size", "images", "steps", "window"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        raise BenchError(f"--warmup must be >= 0, got {args.warmup}")
    if args.steps % args.window:
        raise BenchError(f"--steps ({args.steps}) must be a multiple of --window ({args.window})")
    return args


def require_compiled_ops(device_type: str) -> None:
    """Raise BenchError unless the compiled ops (with CUDA kernels on a GPU) are what the step runs."""
    import torch

    from mpirun_kit.maskrcnn import ops

    if not ops.ops_available():
        raise BenchError(f"the compiled detection ops are not loaded ({ops.load_error()}); the step would time the "
                         "pure-PyTorch references. Build them: pip install --no-build-isolation -e . (FORCE_CUDA=1 "
                         "with nvcc on PATH on a GPU host)")
    if device_type == "cuda":
        missing = [n for n in STEP_OPS if not torch._C._dispatch_has_kernel_for_dispatch_key(f"mpirun_kit::{n}", "CUDA")]
        if missing:
            raise BenchError(f"the compiled ops have no CUDA kernels for {', '.join(missing)}: the extension was built "
                             "without CUDA; rebuild on the GPU host with FORCE_CUDA=1 and nvcc on PATH")


def synthetic_batch(n: int, h: int, w: int, num_classes: int, generator, pin: bool = False) -> list[dict]:
    """In-memory samples in the data loader's format (for tests that drive train_step directly)."""
    import torch

    batch = []
    for i in range(n):
        k = int(torch.randint(3, 9, (1,), generator=generator))
        xy = torch.rand(k, 2, generator=generator) * torch.tensor([w * 0.7, h * 0.7])
        wh = (torch.rand(k, 2, generator=generator) * 0.25 + 0.05) * torch.tensor([w, h])
        boxes = torch.cat([xy, xy + wh], 1)
        masks = torch.zeros(k, h, w, dtype=torch.uint8)
        for j, (x0, y0, x1, y1) in enumerate(boxes.round().long().tolist()):
            masks[j, y0:y1, x0:x1] = 1
        s = {"image": torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator),
             "boxes": boxes, "labels": torch.randint(1, num_classes + 1, (k,), generator=generator),
             "masks": masks, "seed": i, "image_id": i, "orig_size": (h, w), "skipped": []}
        if pin:
            s = {k2: v.pin_memory() if isinstance(v, torch.Tensor) else v for k2, v in s.items()}
        batch.append(s)
    return batch


def write_coco_like(root: Path, n: int, h: int, w: int, num_classes: int = 80, seed: int = 0,
                    data: str = "noise") -> Path:
    """The benchmark's set in ``root``: ``n`` JPEGs + a COCO json (bench_loader.write_coco_like).

    ``data`` "noise": h x w noise JPEGs with 3-12 polygon objects (this benchmark's own set);
    "coco-like": 640x480 photo-like JPEGs with 7 polygon objects (issue #36's, as bench_loader.py's).
    """
    from bench_loader import write_coco_like as write

    if data == "coco-like":
        return write(root, n, 640, 480, objects=7, num_classes=num_classes, seed=seed, texture="photo")
    return write(root, n, w, h, objects=(3, 12), num_classes=num_classes, seed=seed, texture="noise")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_trainer(args: argparse.Namespace, data_dir: Path):
    """The trainer as train.py builds it, in a one-rank process group with DDP."""
    import torch.distributed as dist

    from mpirun_kit.maskrcnn.dist import Comm, DistInfo
    from mpirun_kit.maskrcnn.train import Trainer
    from mpirun_kit.maskrcnn.train import build_parser as train_parser

    sets = ["model.backbone.weights=", "data.train_ann=annotations/instances_train.json", "data.train_images=train",
            "data.val_ann=annotations/instances_train.json", "data.val_images=train"]
    if args.config == "demo":  # its own set: 80 classes, as the benchmark's json
        sets += ["model.num_classes=80"]
    if args.device == "cpu":  # the smoke run: the GPU-only settings would (rightly) refuse to start
        sets += ["solver.amp=none", "solver.channels_last=false", "device=cpu", "data.num_workers=0"]
    train_args = train_parser().parse_args(
        ["--config", args.config, "--data-dir", str(data_dir), "--output-dir", str(data_dir / "out"),
         *[x for s in sets + list(args.overrides) for x in ("--set", s)]])
    t = Trainer(train_args, DistInfo(0, 1, 0, 1))
    t._setup_runtime()
    backend = "nccl" if t.device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    t.comm = Comm(backend, 0, 1)  # the trainer wraps the model in DDP for this backend
    t._build_data()
    t._build_model()
    return t


def host_syncs_per_step(t, batch) -> dict:
    import torch

    from mpirun_kit.maskrcnn.syncs import count_host_syncs

    out = {}
    if t.device.type == "cuda":
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                t.train_step(batch)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        msgs = [str(w.message) for w in caught if "synchroniz" in str(w.message).lower()]
        out["cuda_sync_debug_warnings"] = len(msgs)
        out["cuda_sync_debug_first"] = msgs[:3]
    with count_host_syncs() as report:
        t.train_step(batch)
    out["dispatch_counter"] = report.count
    out["dispatch_counter_lines"] = [f"{n} x {w}: {r}" for w, r, n in report.by_line()]
    return out


def run(args: argparse.Namespace) -> dict:
    import torch
    import torch.distributed as dist

    if args.device == "cuda" and not torch.cuda.is_available():
        raise BenchError("no CUDA device here; run it on a GPU host (or --device cpu for a smoke run)")
    require_compiled_ops(args.device)
    h, w = args.size, int(round(args.size * 1333 / 800))
    with tempfile.TemporaryDirectory(prefix="bench-maskrcnn-gpu-") as tmp:
        data_dir = args.workdir or Path(tmp)
        write_coco_like(data_dir, args.images, h, w, data=args.data)
        t = build_trainer(args, data_dir)
        try:
            ipg = t.cfg.solver.ims_per_gpu
            batches = _batches(t)
            cuda = t.device.type == "cuda"
            sync = torch.cuda.synchronize if cuda else (lambda: None)
            t.ddp_model.train()
            # DDP says once per process when a gradient's strides differ from its bucket view's (a
            # copy per bucket per step: issue #36 saw it for a 1x1 conv weight under channels-last)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(args.warmup):
                    t.train_step(next(batches))
                sync()
            stride_warnings = [str(w.message)[:200] for w in caught if "Grad strides do not match" in str(w.message)]
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            loop = _windows(args, t, ipg, sync, lambda: next(batches))
            # the step alone: one batch already on the device, the same step again and again
            from mpirun_kit.maskrcnn.data.batch import to_device

            on_device = to_device(next(batches), t.device)
            step = _windows(args, t, ipg, sync, lambda: on_device)
            syncs = host_syncs_per_step(t, next(batches))
            loop_rate, step_rate = statistics.median(loop), statistics.median(step)
            return {
                "device": torch.cuda.get_device_name() if cuda else "cpu",
                "preset": args.config, "overrides": list(args.overrides), "ddp": type(t.ddp_model).__name__,
                "set": _set_words(args, h, w, t.cfg), "loader_workers": t.num_workers,
                "ims_per_gpu": ipg, "image_size": [h, w], "amp": t.cfg.solver.amp,
                "channels_last": t.cfg.solver.channels_last, "warmup_steps": args.warmup, "timed_steps": args.steps,
                "images_per_s": round(loop_rate, 2), "window_images_per_s": [round(r, 2) for r in loop],
                "step_only_images_per_s": round(step_rate, 2), "step_only_window_images_per_s": [round(r, 2) for r in step],
                "loop_over_step": round(loop_rate / step_rate, 3),
                "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
                "host_syncs_per_step": syncs, "ddp_grad_stride_warnings": stride_warnings,
                "bar_images_per_s": cost_goal(),
            }
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


def _windows(args: argparse.Namespace, t, ipg: int, sync, batch) -> list[float]:
    """img/s of ``args.steps`` train steps in windows of ``args.window``, each bracketed by ``sync``."""
    rates = []
    for _ in range(args.steps // args.window):
        t0 = time.perf_counter()
        for _ in range(args.window):
            t.train_step(batch())
        sync()
        rates.append(args.window * ipg / (time.perf_counter() - t0))
    return rates


def _set_words(args: argparse.Namespace, h: int, w: int, cfg) -> str:
    size = f"resized to {'/'.join(map(str, cfg.input.min_size_train))} (max {cfg.input.max_size_train})"
    if args.data == "coco-like":
        return f"coco-like: {args.images} photo-like JPEGs 640x480, 7 polygon objects each, {size}"
    return f"noise: {args.images} noise JPEGs {w}x{h}, 3-12 polygon objects each, {size}"


def _batches(t):
    """Endless batches from the trainer's own loader (epoch after epoch)."""
    epoch = 0
    while True:
        t.sampler.set_state(epoch, 0)
        yield from t.train_loader
        epoch += 1


def cost(args: argparse.Namespace) -> tuple[str, dict]:
    """The cost model of the benchmark's config at --size x 1333/800 (rounded up to 32)."""
    from mpirun_kit.maskrcnn.config import ConfigError, resolve_config
    from mpirun_kit.maskrcnn.cost import step_cost, format_cost

    def config(extra: list[str]):
        for kv in [*args.overrides, *extra]:
            if "=" not in kv:
                raise BenchError(f"--set/--cost-baseline {kv!r}: expected KEY=VALUE, e.g. model.roi_heads.mask_rois_per_image=0")
        try:
            return resolve_config(args.config, dict(kv.split("=", 1) for kv in [*args.overrides, *extra]))[0]
        except (ConfigError, ValueError) as exc:
            raise BenchError(f"--set/--cost-baseline: {exc}") from exc

    h, w = args.size, -(-int(round(args.size * 1333 / 800)) // 32) * 32
    after = step_cost(config([]), height=h, width=w)
    before = step_cost(config(args.cost_baseline), height=h, width=w) if args.cost_baseline else None
    result = {"images": after.images, "canvas": list(after.canvas), "mask_slots": after.mask_slots,
              "gflop_per_image": {k: round(v / 1e9, 2) for k, v in after.flops.items()},
              "gb_per_image": {k: round(v / 1e9, 3) for k, v in after.bytes.items()},
              "roofline_images_per_s": round(after.images_per_s, 1), "peak": after.peak.name, "bar_images_per_s": cost_goal(),
              "ops_per_step": after.ops}
    if before:
        result["before"] = {"overrides": args.cost_baseline, "mask_slots": before.mask_slots,
                            "gflop_per_image": {k: round(v / 1e9, 2) for k, v in before.flops.items()},
                            "gb_per_image": {k: round(v / 1e9, 3) for k, v in before.bytes.items()},
                            "roofline_images_per_s": round(before.images_per_s, 1)}
    return format_cost(after, before=before), result


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.cost:
            table, result = cost(args)
            print(table)
        else:
            result = run(args)
    except BenchError as exc:
        print(f"bench_maskrcnn_gpu: error: {exc}", file=sys.stderr)
        return 70
    if "step_only_images_per_s" in result:
        print(f"bench_maskrcnn_gpu: loop {result['images_per_s']} img/s, step only {result['step_only_images_per_s']} "
              f"img/s (loop/step {result['loop_over_step']}) on {result['device']}, {result['loader_workers']} loader "
              f"worker(s), set {result['set']}", file=sys.stderr)
    from bench_loader import emit

    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
