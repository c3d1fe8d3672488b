"""GPU training throughput of the full R50-FPN Mask R-CNN (images/s per GPU and peak memory).

One process, one GPU, the r50_fpn_1x model (random weights: throughput does not depend on them),
synthetic COCO-like batches at 800x1333 with a few boxes and masks per image, SGD steps with AMP
(bf16 by default, or fp16 with a grad scaler) and channels-last, the same forward/backward/step the
trainer runs.  Warm-up steps are excluded; timing brackets ``torch.cuda.synchronize()``.

    python benchmarks/bench_maskrcnn_gpu.py --batch 8 --amp bf16 --steps 50
    python benchmarks/bench_maskrcnn_gpu.py --device cpu --size 256 --batch 2 --steps 2   # smoke run

Reference points (maskrcnn-anchors.md): NVIDIA DLE Mask R-CNN with AMP on A100 ~26 images/s/GPU;
target here >= 30 images/s per H100.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def synthetic_batch(n: int, h: int, w: int, num_classes: int, generator):
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
        batch.append({"image": torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator),
                      "boxes": boxes, "labels": torch.randint(1, num_classes + 1, (k,), generator=generator),
                      "masks": masks, "seed": i, "image_id": i, "orig_size": (h, w)})
    return batch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, default=8, help="images per GPU")
    p.add_argument("--size", type=int, default=800, help="shorter side; the longer is 1333/800 of it")
    p.add_argument("--amp", default="bf16", choices=["bf16", "fp16", "none"])
    p.add_argument("--no-channels-last", action="store_true")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--json", default=None, help="also write the result to this file")
    args = p.parse_args(argv)

    import torch

    from mpirun_kit.maskrcnn import ops
    from mpirun_kit.maskrcnn.config import resolve_config
    from mpirun_kit.maskrcnn.modeling.meta_arch import build_model

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_maskrcnn_gpu: no CUDA device here; run it on a GPU host (or --device cpu for a smoke run)",
              file=sys.stderr)
        return 69
    dev = torch.device(args.device)
    cfg, _ = resolve_config("r50_fpn_1x", {"model.backbone.weights": ""})
    torch.manual_seed(0)
    model = build_model(cfg.model).to(dev).train()
    channels_last = dev.type == "cuda" and not args.no_channels_last
    if channels_last:
        model.to(memory_format=torch.channels_last)
        model.channels_last = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True  # fixed input size here
    opt = torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.02, momentum=0.9, weight_decay=1e-4)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp) if dev.type == "cuda" else None
    scaler = torch.amp.GradScaler(dev.type, enabled=amp_dtype is torch.float16)
    h, w = args.size, int(round(args.size * 1333 / 800))
    g = torch.Generator().manual_seed(0)
    batches = [synthetic_batch(args.batch, h, w, cfg.model.num_classes, g) for _ in range(4)]

    def step(batch):
        with torch.autocast(dev.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            losses = model(batch)
        loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for i in range(args.warmup):
        step(batches[i % len(batches)])
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(batches[i % len(batches)])
    sync()
    dt = time.perf_counter() - t0
    result = {
        "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "compiled_ops": ops.ops_available(), "batch_per_gpu": args.batch, "image_size": [h, w], "amp": args.amp,
        "channels_last": channels_last, "steps": args.steps, "images_per_s": round(args.steps * args.batch / dt, 2),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if dev.type == "cuda" else None,
        "model": "r50_fpn_1x (random init), SGD lr 0.02 momentum 0.9",
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
