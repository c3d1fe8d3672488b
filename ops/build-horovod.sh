#!/usr/bin/env bash
# Builds Horovod (mpirun_kit's optional training backend) into a Python environment,
# against the torch and the MPI already installed there.  ops/quickstart.sh calls it
# (test mode, or WITH_HOROVOD=1); it can also be run on its own:
#
#   bash ops/build-horovod.sh .venv/bin/python
#
# Why a script and not `pip install horovod`: Horovod 0.28.1 (the last release) sets
# CMAKE_CXX_STANDARD 14 in two CMake files, and current torch headers need C++17, so
# the sdist is patched before it builds.  A flag from outside cannot win: CMake's
# set() overrides -DCMAKE_CXX_STANDARD.  The patch is checked, so a future sdist with
# other lines fails here, loudly, instead of building something else.
#
# Environment knobs:
#   HOROVOD_VERSION   default 0.28.1
#   HOROVOD_SDIST     a horovod-VERSION.tar.gz already on disk (offline builds); default: pip downloads it
#   PIP_EXTRA_ARGS    extra arguments for pip (e.g. an index URL)
# With CUDA torch and nvcc (the GPU image), NCCL operations are built in as well.
set -euo pipefail

python="${1:-}"
if [ -z "$python" ] || [ ! -x "$python" ]; then
  echo "usage: bash ops/build-horovod.sh PYTHON  (the interpreter of the environment with torch; got '${python}')" >&2
  exit 2
fi
version="${HOROVOD_VERSION:-0.28.1}"
read -r -a pip_extra <<<"${PIP_EXTRA_ARGS:-}"
log() { printf '\033[1m[build-horovod]\033[0m %s\n' "$*" >&2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sdist="${HOROVOD_SDIST:-}"
if [ -z "$sdist" ]; then
  log "fetching the horovod $version source"
  "$python" -m pip download -q "${pip_extra[@]}" --no-deps --no-binary :all: -d "$work" "horovod==$version"
  sdist="$work/horovod-$version.tar.gz"
fi
if [ ! -f "$sdist" ]; then
  echo "build-horovod: HOROVOD_SDIST=$sdist is not a file; point it at a horovod-$version.tar.gz" >&2
  exit 2
fi
tar -xzf "$sdist" -C "$work"
src="$work/horovod-$version"
if [ ! -d "$src" ]; then
  echo "build-horovod: $sdist does not unpack to horovod-$version/; set HOROVOD_VERSION to its version" >&2
  exit 2
fi

for f in CMakeLists.txt horovod/torch/CMakeLists.txt; do
  if ! grep -q 'set(CMAKE_CXX_STANDARD 14)' "$src/$f"; then
    echo "build-horovod: $f of horovod $version has no 'set(CMAKE_CXX_STANDARD 14)' line to patch;" \
      "check whether this version still needs the C++17 patch (HOROVOD_VERSION=$version)" >&2
    exit 1
  fi
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/$f"
done

if ! command -v cmake >/dev/null; then
  log "installing cmake (Horovod builds with it)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends cmake >/dev/null
fi

export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
# gloo adds minutes of build for a controller mpirun_kit never uses: its jobs start under mpirun
export HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI
# NCCL operations only with CUDA torch: nvcc alone (a CPU torch on a machine with the CUDA
# toolkit) makes Horovod's CMake look for a CUDA runtime the build must not use
if command -v nvcc >/dev/null && "$python" -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
  export HOROVOD_GPU_OPERATIONS=NCCL
fi
export MAKEFLAGS="-j$(nproc)"
log "building horovod $version (a few minutes)"
# no build isolation: the extension must compile against the torch of this environment
"$python" -m pip install -q "${pip_extra[@]}" --no-build-isolation --no-cache-dir "$src"
"$python" -c 'import horovod.torch as hvd; hvd.mpi_built() or exit("build-horovod: horovod built without MPI")'
log "horovod $version built: $("$python" -m horovod.runner.launch --check-build 2>/dev/null | tr -s ' \n' ' ' || true)"
