"""Our Mask R-CNN trainer against torchvision's ``maskrcnn_resnet50_fpn``, same inputs, one process.

The peer nobody here wrote (issue #32).  Both models are built for the standard recipe with random
weights: ResNet-50 + FPN, FrozenBatchNorm, stem and res2 frozen (torchvision: ``trainable_layers=3``),
81 classes (80 + background), and the RPN and RoI sampling sizes of ``r50_fpn_1x``: 2000 pre-NMS
per level and 1000 post-NMS per image in training (1000 / 1000 at test), 256 anchors per image at
50 %, 512 RoIs per image at 25 %, score 0.05, NMS 0.5, 100 detections.  The same 2 images of
512x768 (random pixels; 8 boxes each with an elliptic mask) go to both, at their own size
(torchvision's transform is set to min_size 512 / max_size 768, so it does not resize; our canvas
is 512x768 too), float32.  Ours is ``Trainer.train_step`` as ``main()`` builds it (config
``r50_fpn_1x`` with ``device=cpu``, ``solver.amp=none``, ``solver.channels_last=false``, no backbone
file); torchvision's is its loss dict summed, backward, and SGD with the same LR, momentum and
weight decay.  Inference is ``model.eval()`` on the same batch under ``no_grad``.  With random weights
the two keep different numbers of boxes above the recipe's 0.05 score, so their inference passes
run the mask head and paste on different counts (printed); ``--score-thresh 0`` makes both keep 100
per image.

The two alternate step by step (ours, theirs, theirs, ours, ...), after one warm-up step each, so
the shared machine's load falls on both alike; each prints its per-step times, and the result is
the median ratio ``torchvision / ours`` (> 1: ours is faster) for train and inference, at each
thread count.  Denormal flushing is process-wide, so both sides run under the trainer's setting
(on by default; ``--keep-denormals`` runs both with torch's default).

    .venv-cuda/bin/pip install torchvision==0.28.0     # ops/make-cuda-venv.sh does this
    PYTHONPATH=. .venv-cuda/bin/python benchmarks/bench_vs_torchvision.py [--threads 1 2] [--steps 3]
        [--device cpu|cuda] [--score-thresh 0.05] [--seed 0] [--profile] [--json out.json]

PyPI has no CPU build of torchvision for torch 2.13, so it runs in ``.venv-cuda`` (the CUDA build
of torch, which runs on the CPU as well); our op library, built against the CPU torch of ``.venv``
for the same torch version, loads there (as the fake-CUDA gate relies on).  With ``--device
cuda`` (a GPU machine) both run on the GPU and the times are taken after ``cuda.synchronize()``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from the checkout (the venv-cuda has no install of it)
    sys.path.insert(0, str(REPO))

H, W, BOXES, CLASSES = 512, 768, 8, 80


def make_samples(seed: int = 0) -> list[dict]:
    """2 images of 512x768, 8 boxes each with an ellipse mask inside the box; labels 1..80."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(2):
        img = torch.randint(0, 256, (3, H, W), dtype=torch.uint8, generator=g)
        wh = torch.rand(BOXES, 2, generator=g) * torch.tensor([W * 0.4, H * 0.4]) + 32
        xy = torch.rand(BOXES, 2, generator=g) * (torch.tensor([W, H]) - wh)
        boxes = torch.cat([xy, xy + wh], 1).floor()
        yy, xx = torch.meshgrid(torch.arange(H, dtype=torch.float32), torch.arange(W, dtype=torch.float32),
                                indexing="ij")
        masks = torch.zeros(BOXES, H, W, dtype=torch.uint8)
        for k, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
            cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
            masks[k] = (((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1).to(torch.uint8)
            # paint the object so it differs from the noise around it
            img[:, masks[k].bool()] = torch.randint(0, 256, (3, 1), dtype=torch.uint8, generator=g)
        labels = torch.randint(1, CLASSES + 1, (BOXES,), generator=g)
        out.append({"image": img, "boxes": boxes, "labels": labels, "masks": masks, "seed": 1000 + i,
                    "image_id": i, "orig_size": (H, W), "size": (H, W), "skipped": []})
    return out


def build_ours(device: str, workdir: Path, score_thresh: float = 0.05):
    """The trainer as main() builds it for r50_fpn_1x, random weights, on ``device``."""
    from mpirun_kit.maskrcnn.dist import DistInfo
    from mpirun_kit.maskrcnn.train import Trainer, build_parser

    sets = ["model.backbone.weights=", f"model.num_classes={CLASSES}", "solver.ims_per_gpu=2", "test.ims_per_gpu=2",
            f"device={device}", "backend=gloo", f"model.roi_heads.score_thresh_test={score_thresh}"]
    if device == "cpu":
        sets += ["solver.amp=none", "solver.channels_last=false", "solver.cudnn_benchmark=false"]
    else:
        sets += ["solver.amp=none"]  # fp32 on both sides
    argv = ["--config", "r50_fpn_1x", "--data-dir", str(workdir), "--output-dir", str(workdir / "out")]
    for s in sets:
        argv += ["--set", s]
    t = Trainer(build_parser().parse_args(argv), DistInfo(0, 1, 0, 1))
    return t


def build_torchvision(device: str, score_thresh: float = 0.05):
    import torchvision
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    from torchvision.ops import FrozenBatchNorm2d

    backbone = resnet_fpn_backbone(backbone_name="resnet50", weights=None, norm_layer=FrozenBatchNorm2d,
                                   trainable_layers=3)
    model = MaskRCNN(backbone, num_classes=CLASSES + 1, min_size=H, max_size=W,
                     rpn_pre_nms_top_n_train=2000, rpn_pre_nms_top_n_test=1000,
                     rpn_post_nms_top_n_train=1000, rpn_post_nms_top_n_test=1000, rpn_nms_thresh=0.7,
                     rpn_batch_size_per_image=256, rpn_positive_fraction=0.5,
                     box_batch_size_per_image=512, box_positive_fraction=0.25, box_score_thresh=score_thresh,
                     box_nms_thresh=0.5, box_detections_per_img=100)
    return model.to(device), torchvision.__version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="CPU thread counts to run (default 1 2)")
    p.add_argument("--steps", type=int, default=3, help="timed train steps per side per thread count (after 1 warm-up)")
    p.add_argument("--infer-steps", type=int, default=3, help="timed inference passes per side per thread count")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--keep-denormals", action="store_true",
                   help="run both sides without flushing denormals (--set flush_denormal=false for ours)")
    p.add_argument("--profile", action="store_true",
                   help="after timing, profile one train step of each side (torch.profiler) and print the top ops")
    p.add_argument("--score-thresh", type=float, default=0.05,
                   help="inference score threshold on both sides (default 0.05, the recipe's); 0 makes both return "
                        "100 detections per image, so the two inference passes do the same mask-head work")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the 2 input images, their boxes and masks (default 0; the weights' seed stays 0)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from mpirun_kit.maskrcnn.ops import ops_available

    if not ops_available():
        print("bench_vs_torchvision: our compiled detection ops are not built (pip install --no-build-isolation -e . "
              "in .venv); comparing against the pure-PyTorch references would say nothing", file=sys.stderr)
        return 70
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_vs_torchvision: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 64
    samples = make_samples(args.seed)
    dev = torch.device(args.device)
    with tempfile.TemporaryDirectory() as d:
        ours = build_ours(args.device, Path(d), args.score_thresh)
        if args.keep_denormals:
            import dataclasses

            ours.cfg = dataclasses.replace(ours.cfg, flush_denormal=False)
        ours._setup_runtime()
        torch.manual_seed(0)
        ours._build_model()
        theirs, tv_version = build_torchvision(args.device, args.score_thresh)
        params = [q for q in theirs.parameters() if q.requires_grad]
        opt = torch.optim.SGD(params, lr=0.0, momentum=ours.cfg.solver.momentum, weight_decay=ours.cfg.solver.weight_decay)
        batch = ours.collate(samples)
        tv_images = [s["image"].to(dev).float() / 255.0 for s in samples]
        tv_targets = [{"boxes": s["boxes"].to(dev), "labels": s["labels"].to(dev), "masks": s["masks"].to(dev)}
                      for s in samples]
        # torchvision's transform normalises with ImageNet statistics on [0, 1] input; ours on [0, 255]
        sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
        first: dict[str, dict] = {}

        def ours_train():
            losses, _ = ours.train_step(batch)
            if "ours" not in first:  # the first step's losses (a host read, once, outside the timing's interest)
                first["ours"] = {k: float(v.detach()) for k, v in losses.items()}

        def tv_train():
            for g in opt.param_groups:  # the same LR as ours at this step (warm-up included)
                g["lr"] = ours.optimizer.param_groups[0]["lr"]
            losses = theirs(tv_images, tv_targets)
            if "torchvision" not in first:
                first["torchvision"] = {k: float(v.detach()) for k, v in losses.items()}
            opt.zero_grad()
            sum(losses.values()).backward()
            opt.step()

        def ours_infer():
            with torch.no_grad():
                return sum(int(o["boxes"].shape[0]) for o in ours.model(batch))

        def tv_infer():
            with torch.no_grad():
                return sum(int(o["boxes"].shape[0]) for o in theirs(tv_images))

        def timed(fn):
            sync()
            t0 = time.perf_counter()
            out = fn()
            sync()
            return time.perf_counter() - t0, out

        results = {"device": str(dev), "torch": torch.__version__, "torchvision": tv_version,
                   "score_thresh": args.score_thresh, "seed": args.seed,
                   "denormals_flushed": ours.denormals_flushed, "runs": []}
        print(f"torch {torch.__version__}, torchvision {tv_version}, device {dev}, "
              f"denormals {'flushed' if ours.denormals_flushed else 'kept'}, score threshold {args.score_thresh}, "
              f"input seed {args.seed}", flush=True)
        for n in (args.threads if args.device == "cpu" else [torch.get_num_threads()]):
            torch.set_num_threads(n)
            run = {"threads": n, "train": {"ours": [], "torchvision": []}, "infer": {"ours": [], "torchvision": []},
                   "detections": {}}
            ours.ddp_model.train()
            theirs.train()
            for step in range(args.steps + 1):
                order = [("ours", ours_train), ("torchvision", tv_train)]
                for name, fn in (order if step % 2 == 0 else order[::-1]):
                    dt, _ = timed(fn)
                    print(f"threads={n} train {name:<11} step {step}{' (warm-up)' if step == 0 else ''}: {dt:.3f} s",
                          flush=True)
                    if step:
                        run["train"][name].append(dt)
            ours.model.eval()
            theirs.eval()
            for step in range(args.infer_steps + 1):
                order = [("ours", ours_infer), ("torchvision", tv_infer)]
                for name, fn in (order if step % 2 == 0 else order[::-1]):
                    dt, dets = timed(fn)
                    run["detections"][name] = dets
                    print(f"threads={n} infer {name:<11} pass {step}{' (warm-up)' if step == 0 else ''}: {dt:.3f} s "
                          f"({dets} detections)", flush=True)
                    if step:
                        run["infer"][name].append(dt)
            ours.model.train()
            for kind in ("train", "infer"):
                o, t = (statistics.median(run[kind][k]) for k in ("ours", "torchvision"))
                run[f"{kind}_ratio"] = t / o
                print(f"threads={n} {kind}: ours {o:.3f} s, torchvision {t:.3f} s (medians): "
                      f"torchvision / ours = {t / o:.2f}", flush=True)
            results["runs"].append(run)
        results["first_step_losses"] = first
        print("first-step losses: " + json.dumps({k: {n: round(v, 3) for n, v in d.items()} for k, d in first.items()}))
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            ours.ddp_model.train()
            theirs.train()
            for name, fn in (("ours", ours_train), ("torchvision", tv_train)):
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
                with profile(activities=acts) as prof:
                    fn()
                print(f"--- {name}: one train step, {torch.get_num_threads()} thread(s)")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        ours.comm.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
