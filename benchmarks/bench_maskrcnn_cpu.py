"""CPU time-to-accuracy of the Mask R-CNN demo: the README's main job, measured.

Runs exactly what jobs/maskrcnn-demo.yaml runs -- ``mpirun -np 2 python -m mpirun_kit.maskrcnn.train
--config demo --synthetic-if-missing`` into a fresh data and output directory -- with periodic
evaluation, and reports the wall clock from launch (dataset generation included) to the first
evaluation that reaches the targets (bbox mAP >= 0.50, segm mAP >= 0.45), the final mAPs, the
training throughput, and the conditions: cores, load average before/after, whether the compiled
detection ops or the pure-PyTorch fallbacks ran.

    python benchmarks/bench_maskrcnn_cpu.py [--ranks 2] [--eval-period 300] [--json out.json] [--set k=v ...]
    python benchmarks/bench_maskrcnn_cpu.py --op-ratio-only   # just the compiled-vs-reference step ratio
    PYTHONPATH=<tree> python benchmarks/bench_maskrcnn_cpu.py --step-time-only [--weights demo.pth]  # CPU ms/step

It also measures, in one process and in the same run, the demo's training step time with the
compiled detection ops against the pure-PyTorch references (same model, same batches,
interleaved), reported as a ratio: the baseline that makes the wall-clock figure interpretable.

Targets are figures to report, not assertions (the machine may be shared; say so with the result).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

TARGET_BBOX, TARGET_SEGM, TARGET_WALL_S = 0.50, 0.45, 15 * 60


def op_ratio(steps: int = 6, rounds: int = 3) -> dict:
    """Demo training step time with compiled ops vs the pure-PyTorch references (1 thread)."""
    import torch

    from mpirun_kit.maskrcnn.config import resolve_config
    from mpirun_kit.maskrcnn.data.coco import CocoDataset
    from mpirun_kit.maskrcnn.data.synthetic import write_shapes_dataset
    from mpirun_kit.maskrcnn.modeling.meta_arch import build_model
    from mpirun_kit.maskrcnn.ops import _loader, ops_available

    if not ops_available():
        return {"skipped": "the compiled ops are not built; nothing to compare"}
    torch.set_num_threads(1)
    cfg, _ = resolve_config("demo")
    with tempfile.TemporaryDirectory() as d:
        write_shapes_dataset(d, n_train=4 * steps, n_val=1, size=cfg.data.synthetic_size, seed=1)
        ds = CocoDataset(Path(d) / "annotations/instances_train.json", Path(d) / "train", train=True,
                         min_sizes=cfg.input.min_size_train, max_size=cfg.input.max_size_train, num_classes=3)
        batches = [[ds[(4 * i + j, 4 * i + j)] for j in range(4)] for i in range(steps)]
    times: dict[str, list[float]] = {"compiled": [], "reference": []}
    for _ in range(rounds):  # interleaved, so load changes hit both alike
        for name in times:
            torch.manual_seed(0)
            model = build_model(cfg.model)
            opt = torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.01, momentum=0.9)
            ctx = _loader.using(_loader.ExtensionLoader("/nonexistent/_C.so")) if name == "reference" \
                else _loader.using(_loader.active())
            with ctx, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                for b in batches:
                    loss = sum(model(b).values())
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                times[name].append((time.perf_counter() - t0) / steps)
    best = {k: min(v) for k, v in times.items()}
    return {"s_per_step_compiled": round(best["compiled"], 3), "s_per_step_reference": round(best["reference"], 3),
            "reference_over_compiled": round(best["reference"] / best["compiled"], 2),
            "note": "best of %d rounds of %d steps of 4 images, 1 thread" % (rounds, steps)}


def step_time(weights: Path | None = None, steps: int = 10, rounds: int = 2) -> dict:
    """CPU time of one demo training step (4 images at 160 px, 1 thread, compiled ops).

    Process CPU time, not wall clock, so other load on a shared machine inflates it far less.  It
    uses only config/model/dataset APIs that older trees have too: run it against an old checkout
    with ``PYTHONPATH=<old checkout>`` to compare (README, Benchmarks).  ``weights``: a demo
    checkpoint to start from (a trained model samples more foreground, as the real run does).
    """
    import torch

    import mpirun_kit
    from mpirun_kit.maskrcnn.config import resolve_config
    from mpirun_kit.maskrcnn.data.coco import CocoDataset
    from mpirun_kit.maskrcnn.data.synthetic import write_shapes_dataset
    from mpirun_kit.maskrcnn.modeling.meta_arch import build_model
    from mpirun_kit.maskrcnn.ops import ops_available

    torch.set_num_threads(1)
    cfg, _ = resolve_config("demo")
    torch.manual_seed(0)
    model = build_model(cfg.model).train()
    if weights is not None:
        model.load_state_dict(torch.load(weights, weights_only=True)["model"])
    opt = torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.01, momentum=0.9)
    with tempfile.TemporaryDirectory() as d:
        write_shapes_dataset(d, n_train=4 * steps, n_val=1, size=cfg.data.synthetic_size, seed=2026)
        ds = CocoDataset(Path(d) / "annotations/instances_train.json", Path(d) / "train", train=True,
                         min_sizes=(160,), max_size=224, flip_prob=0.0, num_classes=3)
        batches = [[ds[(4 * i + j, 4 * i + j)] for j in range(4)] for i in range(steps)]

    def step(b):
        loss = sum(model(b).values())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()

    step(batches[0])
    per_round = []
    for _ in range(rounds):
        t0 = time.process_time()
        for b in batches:
            step(b)
        per_round.append((time.process_time() - t0) / steps * 1000)
    return {"tree": str(Path(mpirun_kit.__file__).parent.parent), "compiled_ops": ops_available(),
            "cpu_ms_per_step": round(min(per_round), 1), "rounds": [round(x, 1) for x in per_round],
            "note": f"best of {rounds} rounds of {steps} steps of 4 images, 1 thread, process CPU time"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--eval-period", type=int, default=300, help="steps between evaluations (time-to-accuracy resolution)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--workdir", type=Path, default=None, help="keep data and output here (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    p.add_argument("--op-ratio-only", action="store_true", help="skip the demo run; measure only the op ratio")
    p.add_argument("--step-time-only", action="store_true",
                   help="skip the demo run; print the CPU time of one demo training step (compare trees with PYTHONPATH)")
    p.add_argument("--weights", type=Path, default=None, help="--step-time-only: start from this demo checkpoint")
    args = p.parse_args(argv)
    if args.op_ratio_only:
        print(json.dumps(op_ratio(), indent=2))
        return 0
    if args.step_time_only:
        print(json.dumps(step_time(args.weights), indent=2))
        return 0

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("bench_maskrcnn_cpu: mpirun not found; install openmpi-bin (bash ops/quickstart.sh setup)", file=sys.stderr)
        return 70
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_maskrcnn_"))
    data, out = work / "data", work / "out"
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", str(args.ranks),
           sys.executable, "-W", "ignore::UserWarning", "-m", "mpirun_kit.maskrcnn.train", "--config", "demo",
           "--data-dir", str(data), "--output-dir", str(out), "--synthetic-if-missing",
           "--set", f"test.eval_period={args.eval_period}"]
    for kv in args.overrides:
        cmd += ["--set", kv]
    from mpirun_kit.maskrcnn import ops

    load_before = os.getloadavg()
    t0 = time.monotonic()
    evals, reached = [], None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    for line in proc.stdout:
        sys.stdout.write(line)
        tail = (tail + [line])[-40:]
        m = re.search(r"^step=(\d+) bbox_mAP=([0-9.]+).* segm_mAP=([0-9.]+)", line)
        if m:
            step, bbox, segm = int(m[1]), float(m[2]), float(m[3])
            evals.append({"step": step, "wall_s": round(time.monotonic() - t0, 1), "bbox_mAP": bbox, "segm_mAP": segm})
            if reached is None and bbox >= TARGET_BBOX and segm >= TARGET_SEGM:
                reached = evals[-1]
    rc = proc.wait()
    wall = time.monotonic() - t0
    if rc != 0:
        print("".join(tail), file=sys.stderr)
        print(f"bench_maskrcnn_cpu: training exited {rc}", file=sys.stderr)
        return rc
    final = json.loads((out / "metrics.json").read_text())
    rates = [json.loads(l)["images_per_s"] for l in (out / "metrics.jsonl").read_text().splitlines()
             if '"images_per_s"' in l]
    result = {
        "ranks": args.ranks, "cores": os.cpu_count(), "compiled_ops": ops.ops_available(),
        "load_avg_before": [round(x, 2) for x in load_before], "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(wall, 1), "train_images_per_s": round(rates[-1], 2) if rates else None,
        "final_bbox_mAP": final["bbox_mAP"], "final_segm_mAP": final["segm_mAP"], "steps": final["step"],
        "evals": evals, "time_to_target_s": reached["wall_s"] if reached else None,
        "targets": {"bbox_mAP": TARGET_BBOX, "segm_mAP": TARGET_SEGM, "wall_s": TARGET_WALL_S},
        "met": bool(reached) and reached["wall_s"] <= TARGET_WALL_S,
        "overrides": args.overrides,
        "step_time_compiled_vs_reference": op_ratio(),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
