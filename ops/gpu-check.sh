#!/usr/bin/env bash
# Every GPU check of the Mask R-CNN trainer in one call (issue #36): on a host with a CUDA GPU and
# the CUDA toolkit, builds the op extension for that GPU's architecture only, runs
# tests/maskrcnn/ops/test_ops_cuda.py, the step/loop benchmark on both sets (loop and step-only
# img/s side by side), solver.cuda_graphs=true, solver.ims_per_gpu=8, the peer comparison with
# torchvision, bench_ops on the GPU, the demo trained on the GPU and the loader benchmark; prints one
# summary and writes OUT/gpu-check.json (+ one log per step).  Sized to finish in under 8 minutes on
# one H100 (--budget-s).  Without a GPU it says so in one line, runs a CPU smoke of the same scripts
# and exits 0.
#
#   bash ops/gpu-check.sh [OUT]                  # default OUT: gpu-check-out/
#   bash ops/gpu-check.sh --fetch-wheels         # where PyPI is reachable: the wheels a bare GPU
#                                                # machine lacks (pycocotools, jsonschema's set, ninja)
#                                                # into gpu-wheels/, for Python 3.12; carry that
#                                                # folder to the GPU machine with the checkout
#
# The interpreter: $PYTHON, else .venv/bin/python when the checkout has one, else python3 (a GPU
# machine's own, with CUDA torch).  The logic is ops/gpu_check.py.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then py="$repo/.venv/bin/python"; else py="$(command -v python3)"; fi
fi
exec "$py" "$repo/ops/gpu_check.py" "$@"
