#!/usr/bin/env bash
# Makes .venv-cuda: the CUDA build of torch (no GPU needed) and the few packages the fake-CUDA gate
# imports, for tests/maskrcnn/test_maskrcnn_gpu_path.py, plus torchvision for the peer benchmark
# benchmarks/bench_vs_torchvision.py (PyPI has no CPU torchvision for this torch: its CUDA build
# runs on the CPU too, and pairs with the CUDA torch wheel here).  The gate runs the project from the
# checkout (PYTHONPATH), with the op library built against the CPU torch of .venv: it loads in
# CUDA torch of the same version, and its fake kernels answer for fake cuda tensors.
#
#   bash ops/make-cuda-venv.sh [VENV_DIR]     # default <repo>/.venv-cuda (gitignored)
#
# Idempotent: a venv whose stamp matches is left as it is.  Costs a 2.7 GB download and 4.7 GB
# on disk (about 1-2 minutes here).  The pip config of this machine points at CPU-only wheels, so
# the CUDA wheel is fetched with PIP_CONFIG_FILE=/dev/null and without PIP_FIND_LINKS.
#
# Environment knobs:
#   TORCH_SPEC      the torch to install (default torch==2.13.0: its PyPI wheel is CUDA 13.0; keep it
#                   the version of .venv, which the op library was built against)
#   TORCHVISION_SPEC the torchvision built for that torch (default torchvision==0.28.0)
#   PIP_EXTRA_ARGS  extra arguments for every pip install
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv-cuda}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TORCHVISION_SPEC="${TORCHVISION_SPEC:-torchvision==0.28.0}"
read -r -a pip_extra <<<"${PIP_EXTRA_ARGS:-}"
# what the gate imports: the trainer, COCO data (pycocotools, pillow), the config (pyyaml)
gate_pkgs=(numpy "pyyaml>=6" "psutil>=5.9" "pycocotools>=2.0.7" "pillow>=10" "tqdm>=4.66")
want="$TORCH_SPEC $TORCHVISION_SPEC ${gate_pkgs[*]}"
stamp="$venv/.make-cuda-venv-stamp"
log() { printf '\033[1m[make-cuda-venv]\033[0m %s\n' "$*" >&2; }

if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$venv/bin/python" -c 'import torch, sys; sys.exit(torch.version.cuda is None)' 2>/dev/null; then
  exit 0
fi
log "installing CUDA $TORCH_SPEC into $venv (2.7 GB download; the fake-CUDA gate of the test suite)"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# one resolve for both, so pip cannot pick a torchvision that wants another torch
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -q "${pip_extra[@]}" "$TORCH_SPEC" "$TORCHVISION_SPEC"
"$venv/bin/python" -m pip install -q "${pip_extra[@]}" "${gate_pkgs[@]}"
if ! "$venv/bin/python" -c 'import torch, sys; sys.exit(torch.version.cuda is None)'; then
  echo "make-cuda-venv: $venv has a torch without CUDA ($TORCH_SPEC resolved to a CPU wheel); check PIP_EXTRA_ARGS" >&2
  exit 1
fi
echo "$want" >"$stamp"
