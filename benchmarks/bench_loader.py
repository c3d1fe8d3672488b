"""The Mask R-CNN trainer's data pipeline alone: images/s per core and per loader-worker count, any machine.

What it times is what a loader worker of ``python -m mpirun_kit.maskrcnn.train`` does for each image:
``CocoDataset.__getitem__`` (JPEG decode, size and flip draw, box-local mask rasterisation) and the
trainer's collate (the padded batch), over a COCO-like set written once into ``--workdir``: JPEGs of
640x480 (smooth, photo-like content: noise would make the decode unrealistically slow) with 7 polygon
objects each, resized to 800 (the r50_fpn_1x preset's input sizes).  No GPU and no model: the
resize, flip and normalisation the device does (``MaskRCNN.preprocess``) are not in these figures.

* per core: one process, one intra-op thread, the samples and collates of ``--batches`` batches
  back to back; img/s per second of this process's CPU time (what one loader worker on one core
  can deliver, whatever else the machine runs), the wall-clock rate next to it;
* per worker count: the trainer's own ``DataLoader`` settings (batch sampler, collate, worker
  init) with each count of ``--workers``, img/s over ``--batches`` batches after one warm-up batch
  per worker (on a machine with fewer cores than workers the figure flattens: cores, not workers).

    python benchmarks/bench_loader.py                          # 640x480 -> 800, 7 objects, workers 1 and 2
    python benchmarks/bench_loader.py --workers 1,2,4,8 --json loader.json
    python benchmarks/bench_loader.py --images 8 --batches 2 --workers 1   # smoke

Issue #36's bar: >= 50 img/s per core on this set (24.7 before the work of that issue).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

#: the per-core bar (issue #36): half the per-image CPU cost of the 24.7 img/s measured before
BAR_PER_CORE = 50.0


class BenchError(Exception):
    """A bad argument (the message names it and what is expected)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench_loader.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=64, help="images in the written set (default 64)")
    p.add_argument("--size", default="640x480", help="WIDTHxHEIGHT of the written JPEGs (default 640x480)")
    p.add_argument("--objects", type=int, default=7, help="polygon objects per image (default 7)")
    p.add_argument("--min-size", type=int, default=800, help="shorter side after the resize (default 800)")
    p.add_argument("--max-size", type=int, default=1333, help="cap on the longer side (default 1333)")
    p.add_argument("--ims-per-batch", type=int, default=4, help="images per batch (default 4, the preset's)")
    p.add_argument("--batches", type=int, default=32, help="timed batches per measurement (default 32)")
    p.add_argument("--repeats", type=int, default=3, help="per-core measurements; the median is reported (default 3)")
    p.add_argument("--workers", default="1,2", help="comma-separated loader worker counts (default 1,2; empty: none)")
    p.add_argument("--workdir", type=Path, default=None, help="keep the written set here (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    for name in ("images", "objects", "min_size", "max_size", "ims_per_batch", "batches", "repeats"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    try:
        w, h = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise BenchError(f"--size {args.size!r}: expected WIDTHxHEIGHT, e.g. 640x480") from None
    if w < 32 or h < 32:
        raise BenchError(f"--size {args.size!r}: each side must be >= 32")
    args.width, args.height = w, h
    try:
        args.worker_counts = [int(v) for v in args.workers.split(",") if v.strip()]
    except ValueError:
        raise BenchError(f"--workers {args.workers!r}: expected comma-separated counts, e.g. 1,2,4") from None
    if any(n < 1 for n in args.worker_counts):
        raise BenchError(f"--workers {args.workers!r}: each count must be >= 1 (the per-core figure is the 0-worker one)")
    if args.images < args.ims_per_batch:
        raise BenchError(f"--images ({args.images}) must be >= --ims-per-batch ({args.ims_per_batch})")
    return args


def write_coco_like(root: Path, n: int, width: int, height: int, objects: int | tuple[int, int] = 7,
                    num_classes: int = 80, seed: int = 0, texture: str = "photo") -> Path:
    """``n`` JPEGs with polygon instances + a COCO json (train and val share it); returns the json.

    ``objects``: per image, a count or an inclusive (low, high) range drawn per image.  ``texture``
    "photo": low-frequency colour (a coarse random field upsampled) with mild grain, as a photo
    compresses and decodes; "noise": uniform noise (bench_maskrcnn_gpu.py's own set; slow to
    decode, not what users feed the trainer).  Each object is a filled 8-16-gon with its polygon
    annotation.  Written once per root (the json, written last, marks a complete set).
    """
    import numpy as np
    from PIL import Image, ImageDraw

    from mpirun_kit.core.files import write_json_atomic

    ann_path = root / "annotations" / "instances_train.json"
    if ann_path.is_file():
        return ann_path
    rng = np.random.default_rng(seed)
    (root / "train").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    for i in range(n):
        if texture == "noise":
            img = Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
        else:
            coarse = Image.fromarray(rng.integers(0, 255, (height // 40 + 2, width // 40 + 2, 3), dtype=np.uint8))
            arr = np.asarray(coarse.resize((width, height), Image.BICUBIC)).astype(np.int16)
            img = Image.fromarray((arr + rng.integers(-6, 7, arr.shape)).clip(0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(img)
        low, high = (objects, objects) if isinstance(objects, int) else objects
        for _ in range(int(rng.integers(low, high + 1))):
            bw, bh = rng.uniform(0.08, 0.4) * width, rng.uniform(0.08, 0.4) * height
            cx, cy = rng.uniform(bw / 2, width - bw / 2), rng.uniform(bh / 2, height - bh / 2)
            angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(8, 17))))
            radii = rng.uniform(0.6, 1.0, len(angles))
            poly = [(float(cx + r * bw / 2 * np.cos(a)), float(cy + r * bh / 2 * np.sin(a))) for a, r in zip(angles, radii)]
            draw.polygon(poly, fill=tuple(int(c) for c in rng.integers(0, 255, 3)))
            xs, ys = [p[0] for p in poly], [p[1] for p in poly]
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": int(rng.integers(1, num_classes + 1)),
                         "segmentation": [[c for p in poly for c in p]], "iscrowd": 0,
                         "bbox": [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)],
                         "area": (max(xs) - min(xs)) * (max(ys) - min(ys)) * 0.7})
        name = f"{i:06d}.jpg"
        img.save(root / "train" / name, quality=90)
        images.append({"id": i + 1, "file_name": name, "height": height, "width": width})
    ann_path.parent.mkdir(parents=True, exist_ok=True)
    cats = [{"id": c, "name": f"class{c}", "supercategory": "shape"} for c in range(1, num_classes + 1)]
    write_json_atomic(ann_path, {"images": images, "annotations": anns, "categories": cats})
    return ann_path


def _dataset(args: argparse.Namespace, root: Path):
    from mpirun_kit.maskrcnn.data.coco import CocoDataset

    return CocoDataset(root / "annotations" / "instances_train.json", root / "train", train=True,
                       min_sizes=(args.min_size,), max_size=args.max_size, flip_prob=0.5, num_classes=80)


def per_core(args: argparse.Namespace, ds) -> dict:
    """Samples + collate in this process on one thread: img/s one loader worker gives on one core."""
    import torch

    from mpirun_kit.maskrcnn.data.batch import Collate

    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # restored below: a caller in the same process (a test) keeps its own setting
    try:
        collate = Collate(32)
        n, b = len(ds), args.ims_per_batch
        rates, cpu_rates, decode_ms = [], [], []
        for rep in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            for k in range(args.batches):
                collate([ds[((k * b + j) % n, rep * 100003 + k * b + j)] for j in range(b)])
            # CPU time of this one-thread process: the per-core figure, whatever else the machine runs
            cpu_rates.append(args.batches * b / (time.process_time() - c0))
            rates.append(args.batches * b / (time.perf_counter() - t0))
            c0 = time.process_time()
            for j in range(min(n, 16)):
                ds._read(j)
            decode_ms.append((time.process_time() - c0) * 1000 / min(n, 16))
    finally:
        torch.set_num_threads(threads)
    return {"images_per_cpu_s": round(statistics.median(cpu_rates), 1),
            "images_per_s": round(statistics.median(rates), 1), "runs_images_per_cpu_s": [round(r, 1) for r in cpu_rates],
            "decode_ms_per_image": round(statistics.median(decode_ms), 2)}


def per_workers(args: argparse.Namespace, ds, workers: int) -> float:
    """img/s from a DataLoader with ``workers`` workers, the trainer's sampler/collate/worker init."""
    from torch.utils.data import DataLoader

    from mpirun_kit.maskrcnn.data.batch import Collate
    from mpirun_kit.maskrcnn.data.sampler import TrainBatchSampler
    from mpirun_kit.maskrcnn.train import _worker_init

    sampler = TrainBatchSampler(ds.aspect_groups, args.ims_per_batch, rank=0, world_size=1, seed=0, grouping=True)
    loader = DataLoader(ds, batch_sampler=sampler, num_workers=workers, collate_fn=Collate(32),
                        worker_init_fn=_worker_init, persistent_workers=True, prefetch_factor=2)

    def batches():
        epoch = 0
        while True:
            sampler.set_state(epoch, 0)
            yield from loader
            epoch += 1

    it = batches()
    for _ in range(workers):  # every worker started and through its first batch
        next(it)
    t0 = time.perf_counter()
    for _ in range(args.batches):
        next(it)
    rate = args.batches * args.ims_per_batch / (time.perf_counter() - t0)
    del it, loader
    return round(rate, 1)


def run(args: argparse.Namespace) -> dict:
    import PIL
    import torch

    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp:
        root = args.workdir or Path(tmp)
        write_coco_like(root, args.images, args.width, args.height, args.objects)
        ds = _dataset(args, root)
        core = per_core(args, ds)
        workers = {str(w): per_workers(args, ds, w) for w in args.worker_counts}
    return {"set": f"{args.images} JPEGs {args.width}x{args.height}, {args.objects} polygon objects each, "
                   f"resized to {args.min_size} (max {args.max_size})",
            "ims_per_batch": args.ims_per_batch, "batches": args.batches, "host_cpus": os.cpu_count(),
            "torch": torch.__version__, "pillow": PIL.__version__,
            "per_core_images_per_s": core["images_per_cpu_s"], "per_core_runs": core["runs_images_per_cpu_s"],
            "one_process_wall_images_per_s": core["images_per_s"],
            "decode_ms_per_image": core["decode_ms_per_image"],
            "workers_images_per_s": workers, "bar_per_core_images_per_s": BAR_PER_CORE}


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except BenchError as exc:
        print(f"bench_loader: error: {exc}", file=sys.stderr)
        return 2
    emit(run(args), args.json)
    return 0


def emit(result: dict, path: Path | None) -> None:
    """The result as JSON on stdout, and into ``path`` when given (the benchmarks' one output form)."""
    text = json.dumps(result, indent=2)
    print(text)
    if path:
        path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
