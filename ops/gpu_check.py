"""Every GPU check of the Mask R-CNN trainer in one call: one summary table and one JSON file.

Run by ``ops/gpu-check.sh`` (which says how).  On a host with a CUDA GPU it builds the op extension
for that GPU's architecture only, runs ``tests/maskrcnn/ops/test_ops_cuda.py``, the step and loop
benchmark on both sets (``bench_maskrcnn_gpu.py --data noise|coco-like``: loop and step-only img/s
side by side), the same with ``solver.cuda_graphs=true`` and with ``solver.ims_per_gpu=8``, the
peer comparison (``bench_vs_torchvision.py --device cuda``), the op benchmark (``bench_ops.py
--device cuda``), the demo trained on the GPU (``--set device=cuda``) and the loader benchmark,
each with its own deadline inside an overall budget (8 minutes on one H100 by default: a step that
would not fit is skipped and says so).  Without a GPU it says so in one line and runs a CPU smoke of
the same scripts (tiny sizes; what needs a GPU is skipped and says why), then exits 0.

Each step's output goes to ``OUT/<step>.log``; ``OUT/gpu-check.json`` holds every step's status,
seconds, command and figures.  Exit status: 0 when every step that ran passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: what a bare GPU machine lacks for the trainer and the tests (ops/gpu-check.sh --fetch-wheels)
DEPS = ("pycocotools", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "attrs",
        "ninja")  # ninja: the extension's build runs its MAX_JOBS compiles in parallel only with it


@dataclass
class Step:
    name: str
    argv: list[str]
    timeout_s: int
    #: what the step is expected to take on one H100 (the budget check), seconds
    expect_s: int
    parse: str = ""  # which figures to read from its output (see _figures)
    env: dict[str, str] = field(default_factory=dict)
    skip: str = ""  # a reason: the step is reported as skipped and not run


def steps(py: str, out: Path, gpu: bool, arch: str) -> list[Step]:
    """The checks in order; ``gpu`` False: the CPU smoke of the same scripts."""
    bench = [py, "benchmarks/bench_maskrcnn_gpu.py"]
    if gpu:
        timed = ["--warmup", "15", "--steps", "45", "--window", "15"]
        return [
            Step("build", [py, "setup.py", "build_ext", "--inplace"], 240, 60,
                 env={"FORCE_CUDA": "1", "MRK_CUDA_ARCH": arch, "MAX_JOBS": str(os.cpu_count() or 4)}),
            Step("test_ops_cuda", [py, "-m", "pytest", "tests/maskrcnn/ops/test_ops_cuda.py", "-q", "-p",
                                   "no:cacheprovider", "--confcutdir", "tests/maskrcnn/ops"], 180, 60, "pytest"),
            Step("bench_noise", [*bench, "--data", "noise", *timed, "--json", str(out / "bench_noise.json")],
                 150, 40, "bench"),
            Step("bench_coco_like", [*bench, "--data", "coco-like", *timed, "--json", str(out / "bench_coco_like.json")],
                 150, 40, "bench"),
            Step("demo_cuda", [py, "-m", "mpirun_kit.maskrcnn.train", "--config", "demo", "--data-dir",
                               str(out / "demo-data"), "--output-dir", str(out / "demo-out"), "--synthetic-if-missing",
                               "--set", "device=cuda"], 180, 40, "demo"),
            Step("bench_ops_cuda", [py, "benchmarks/bench_ops.py", "--device", "cuda"], 90, 15, "table"),
            Step("peer_torchvision", [py, "benchmarks/bench_vs_torchvision.py", "--device", "cuda", "--steps", "8",
                                      "--infer-steps", "4", "--json", str(out / "peer.json")], 180, 50, "table"),
            Step("bench_cuda_graphs", [*bench, "--data", "coco-like", "--set", "solver.cuda_graphs=true", "--warmup",
                                       "10", "--steps", "30", "--window", "15", "--json", str(out / "bench_graphs.json")],
                 240, 90, "bench"),
            Step("loader", [py, "benchmarks/bench_loader.py", "--workers", "1,2,4,8,14", "--json",
                            str(out / "loader.json")], 120, 30, "loader"),
            Step("bench_ims8", [*bench, "--data", "coco-like", "--set", "solver.ims_per_gpu=8", "--warmup", "10",
                                "--steps", "30", "--window", "15", "--json", str(out / "bench_ims8.json")], 150, 40,
                 "bench"),
        ]
    tiny = ["--device", "cpu", "--config", "demo", "--images", "4", "--warmup", "0", "--steps", "1", "--window", "1",
            "--set", "input.min_size_train=[64]", "--set", "input.max_size_train=96"]
    no_gpu = "needs a CUDA GPU"
    return [
        Step("build", [], 0, 0, skip="no CUDA GPU: the CPU build in place is what runs"),
        Step("test_ops_cuda", [py, "-m", "pytest", "tests/maskrcnn/ops/test_ops_cuda.py", "-q", "-p",
                               "no:cacheprovider", "--confcutdir", "tests/maskrcnn/ops"], 120, 10, "pytest"),
        Step("bench_noise", [*bench, *tiny, "--data", "noise", "--size", "64", "--json", str(out / "bench_noise.json")],
             120, 10, "bench"),
        Step("bench_coco_like", [*bench, *tiny, "--data", "coco-like", "--json", str(out / "bench_coco_like.json")],
             120, 10, "bench"),
        Step("demo_cuda", [], 0, 0, skip=no_gpu + " (the CPU demo is README's and tests/test_readme.py's)"),
        Step("bench_ops_cuda", [py, "benchmarks/bench_ops.py", "--help"], 60, 5),
        Step("peer_torchvision", [py, "benchmarks/bench_vs_torchvision.py", "--help"], 60, 5),
        Step("bench_cuda_graphs", [], 0, 0, skip=no_gpu + " (solver.cuda_graphs refuses the CPU)"),
        Step("loader", [py, "benchmarks/bench_loader.py", "--images", "4", "--size", "64x48", "--min-size", "80",
                        "--max-size", "120", "--batches", "2", "--repeats", "1", "--workers", "1", "--json",
                        str(out / "loader.json")], 120, 10, "loader"),
        Step("bench_ims8", [], 0, 0, skip=no_gpu),
    ]


def _figures(kind: str, text: str, out: Path, step: Step) -> dict:
    """The figures worth a summary line, read from a step's output (or its JSON file)."""
    if kind == "pytest":
        counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", text))
        return counts
    if kind in ("bench", "loader"):
        path = Path(step.argv[step.argv.index("--json") + 1])
        if not path.is_file():
            return {}
        r = json.loads(path.read_text())
        if kind == "loader":
            return {"per_core_images_per_s": r["per_core_images_per_s"], "workers_images_per_s": r["workers_images_per_s"]}
        keys = ("images_per_s", "step_only_images_per_s", "loop_over_step", "loader_workers", "peak_memory_gib",
                "ims_per_gpu", "set", "device")
        return {k: r.get(k) for k in keys} | {"host_syncs": r.get("host_syncs_per_step", {}).get("cuda_sync_debug_warnings"),
                                              "ddp_stride_warnings": len(r.get("ddp_grad_stride_warnings", []))}
    if kind == "demo":
        m = re.search(r"bbox_mAP=([0-9.]+) segm_mAP=([0-9.]+)", text)
        speed = [float(v) for v in re.findall(r"images_per_s=([0-9.]+)", text)]
        return ({"bbox_mAP": float(m.group(1)), "segm_mAP": float(m.group(2))} if m else {}) | (
            {"max_images_per_s": max(speed)} if speed else {})
    if kind == "table":
        return {"tail": text.strip().splitlines()[-12:]}
    return {}


def _deps(py: str, out: Path, wheels: Path | None) -> tuple[dict[str, str], str]:
    """PYTHONPATH for the steps; pycocotools & co. installed from ``wheels`` when missing here."""
    env = {"PYTHONPATH": str(REPO)}
    probe = subprocess.run([py, "-c", "import pycocotools, jsonschema, ninja"], capture_output=True, text=True)
    if probe.returncode == 0:
        return env, "present"
    if not wheels or not any(wheels.glob("*.whl")):
        return env, (f"missing ({probe.stderr.strip().splitlines()[-1]}); fetch them where a package index is "
                     "reachable (bash ops/gpu-check.sh --fetch-wheels) and carry gpu-wheels/ along")
    target = out / "pydeps"
    subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", "--target", str(target),
                    *map(str, sorted(wheels.glob("*.whl")))], check=False)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{target}"
    env["PATH"] = f"{target / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"  # ninja's binary
    return env, f"installed from {wheels} into {target}"


def fetch_wheels(py: str, dest: Path, python_version: str) -> int:
    """Download the trainer's missing dependencies as manylinux wheels for the GPU machine's Python."""
    dest.mkdir(parents=True, exist_ok=True)
    return subprocess.run([py, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python_version,
                           "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
                           "--no-deps", "-d", str(dest), *DEPS]).returncode


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    gpu, arch, device = False, "", "no CUDA GPU"
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            gpu, arch, device = True, f"{major}{minor}", f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
        versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
    except ImportError:
        versions = {"torch": None}
    if not gpu:
        print("gpu-check: no CUDA GPU on this machine (torch.cuda.is_available() is False): running the CPU smoke "
              "of the same scripts, then exiting 0", flush=True)
    env, deps = _deps(py, out, args.wheels)
    budget = args.budget_s if gpu else 10 ** 6
    t_start = time.monotonic()
    results = []
    for step in steps(py, out, gpu, arch):
        if args.only and step.name not in args.only:
            continue
        used = time.monotonic() - t_start
        rec: dict = {"name": step.name, "command": " ".join(step.argv)}
        if step.skip:
            rec.update(status="skipped", why=step.skip)
        elif used + step.expect_s > budget:
            rec.update(status="skipped", why=f"over the {budget:.0f} s budget ({used:.0f} s used)")
        else:
            t0 = time.monotonic()
            log_path = out / f"{step.name}.log"
            try:
                proc = subprocess.run(step.argv, cwd=REPO, env={**os.environ, **env, **step.env},
                                      capture_output=True, text=True, timeout=step.timeout_s)
                text, rc = proc.stdout + proc.stderr, proc.returncode
            except subprocess.TimeoutExpired as exc:
                text = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                text += f"\n[gpu-check] stopped after its {step.timeout_s} s deadline\n"
                rc = 124
            log_path.write_text(text)
            rec.update(status="ok" if rc == 0 else "failed", rc=rc, seconds=round(time.monotonic() - t0, 1),
                       log=str(log_path))
            if rc != 0:
                rec["tail"] = text.strip().splitlines()[-8:]
            try:
                rec["figures"] = _figures(step.parse, text, out, step)
            except (ValueError, KeyError, json.JSONDecodeError) as exc:
                rec["figures"] = {"unreadable": str(exc)}
        results.append(rec)
        print(_line(rec), flush=True)
    summary = {"device": device, "gpu": gpu, "arch": arch, "versions": versions, "dependencies": deps,
               "budget_s": budget if gpu else None, "seconds": round(time.monotonic() - t_start, 1),
               "steps": results}
    (out / "gpu-check.json").write_text(json.dumps(summary, indent=2))
    failed = [r["name"] for r in results if r["status"] == "failed"]
    print(f"gpu-check: {device}; {sum(r['status'] == 'ok' for r in results)} ok, {len(failed)} failed"
          f"{' (' + ', '.join(failed) + ')' if failed else ''}, {sum(r['status'] == 'skipped' for r in results)} "
          f"skipped in {summary['seconds']} s; dependencies {deps}; results in {out / 'gpu-check.json'}")
    if not gpu:
        return 0 if not failed else 1
    return 1 if failed else 0


def _line(rec: dict) -> str:
    """One summary line per step: status, seconds, the headline figures."""
    head = f"  {rec['name']:<18} {rec['status']:<8}"
    if rec["status"] == "skipped":
        return f"{head} {rec['why']}"
    f = rec.get("figures", {})
    if "step_only_images_per_s" in f:
        text = (f"loop {f['images_per_s']} img/s, step only {f['step_only_images_per_s']} (loop/step "
                f"{f['loop_over_step']}), {f['loader_workers']} workers, {f['ims_per_gpu']} img/GPU, "
                f"peak {f['peak_memory_gib']} GiB, sync warnings {f['host_syncs']}, DDP stride warnings "
                f"{f['ddp_stride_warnings']}")
    elif "per_core_images_per_s" in f:
        text = f"loader {f['per_core_images_per_s']} img/s per core; by workers {f['workers_images_per_s']}"
    elif "bbox_mAP" in f:
        text = f"bbox mAP {f['bbox_mAP']}, segm mAP {f['segm_mAP']}, up to {f.get('max_images_per_s')} img/s"
    elif any(k in f for k in ("passed", "failed", "skipped")):
        text = ", ".join(f"{v} {k}" for k, v in f.items())
    else:
        text = ""
    return f"{head} {rec['seconds']:>6} s  {text}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", type=Path, default=REPO / "gpu-check-out",
                   help="folder for the logs and gpu-check.json (default gpu-check-out/)")
    p.add_argument("--budget-s", type=float, default=470.0, help="overall seconds on a GPU (default 470: under 8 min)")
    p.add_argument("--wheels", type=Path, default=REPO / "gpu-wheels",
                   help="wheels of the trainer's dependencies for a machine without a package index (default gpu-wheels/)")
    p.add_argument("--only", action="append", default=[], metavar="STEP", help="run only this step (repeatable)")
    p.add_argument("--fetch-wheels", action="store_true",
                   help="download the dependencies' wheels into --wheels for --python-version, then exit")
    p.add_argument("--python-version", default="3.12", help="--fetch-wheels: the GPU machine's Python (default 3.12)")
    args = p.parse_args(argv)
    if args.fetch_wheels:
        return fetch_wheels(sys.executable, args.wheels, args.python_version)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
