#!/usr/bin/env bash
# Builds the op extension's CUDA kernels against CUDA torch on a machine without a GPU,
# and checks what can be checked there: every .cu compiles for sm_80/sm_90, the library
# links and loads, every op registers a CUDA kernel next to its CPU one, and the CPU
# tests pass against this build.  The kernels do not run: that needs a GPU host
# (pytest tests/maskrcnn/ops/test_ops_cuda.py there).
#
#   bash ops/check-cuda-build.sh [VENV_DIR]     # default /var/tmp/mpirun-kit-cuda-venv
#
# Needs nvcc (CUDA_HOME, default /usr/local/cuda) and about 5 GB for CUDA torch and the
# CUDA libraries it depends on.  The build runs in a copy of the working tree, so the
# CPU-only library in mpirun_kit/maskrcnn/ stays as it is.  On 2 cores it takes ~12 min.
#
# Environment knobs:
#   TORCH_SPEC      CUDA torch to build against (default torch==2.13.0, whose PyPI wheel is CUDA 13.0)
#   PIP_EXTRA_ARGS  extra arguments for pip; where a pip config points pip at CPU-only wheels,
#                   run with PIP_CONFIG_FILE=/dev/null
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-/var/tmp/mpirun-kit-cuda-venv}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
read -r -a pip_extra <<<"${PIP_EXTRA_ARGS:-}"
log() { printf '\033[1m[check-cuda-build]\033[0m %s\n' "$*" >&2; }

if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "check-cuda-build: no nvcc at $CUDA_HOME/bin/nvcc; install the CUDA toolkit or set CUDA_HOME" >&2
  exit 2
fi
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv with $TORCH_SPEC"
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q "${pip_extra[@]}" "$TORCH_SPEC" numpy setuptools wheel ninja pillow pycocotools \
  pyyaml psutil pytest pytest-timeout hypothesis
if ! "$venv/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
  echo "check-cuda-build: $TORCH_SPEC in $venv is a CPU-only build; point pip at the CUDA wheels" \
    "(on a machine whose pip config prefers CPU wheels: PIP_CONFIG_FILE=/dev/null)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# the working tree as it is (committed or not), without environments and build output
tar -C "$repo" --exclude=./.venv --exclude=./.venv-checkov --exclude=./build --exclude=./.git \
  --exclude='*.so' -cf - . | tar -C "$work" -xf -
log "building the extension with CUDA kernels (nvcc $("$CUDA_HOME/bin/nvcc" --version | grep -o 'release [0-9.]*'))"
(cd "$work" && FORCE_CUDA=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" "$venv/bin/python" setup.py -q build_ext --inplace)

log "checking the kernels' registration and running the CPU op tests against this build"
cd "$work"
PYTHONPATH="$work" "$venv/bin/python" - <<'PY'
import re
import sys
from pathlib import Path

import torch

from mpirun_kit.maskrcnn import ops

ops._loader.active().require()
csrc = Path("mpirun_kit/maskrcnn/csrc/ops")
names = sorted({m for f in csrc.glob("cuda/*_kernel.cu") for m in re.findall(r'm\.impl\("(\w+)"', f.read_text())})
missing = [n for n in names if not torch._C._dispatch_has_kernel_for_dispatch_key(f"mpirun_kit::{n}", "CUDA")]
print(f"torch {torch.__version__}: CUDA kernels registered for {len(names) - len(missing)} of {len(names)} ops")
sys.exit(f"check-cuda-build: no CUDA kernel registered for {missing}" if missing else 0)
PY
PYTHONPATH="$work" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/maskrcnn/ops
