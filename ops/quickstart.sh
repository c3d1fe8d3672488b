#!/usr/bin/env bash
# Sets up everything mpirun_kit needs on a fresh Debian/Ubuntu machine (as root),
# then runs the main job or the test suite.  Idempotent: a second run installs
# nothing new and goes straight to the work.
#
#   bash ops/quickstart.sh demo    # set up, then run jobs/maskrcnn-demo.yaml
#   bash ops/quickstart.sh test    # set up, then run the test suite (what CI runs)
#   bash ops/quickstart.sh setup   # set up only
#
# Environment knobs:
#   TORCH_SPEC      pip requirement for torch (default torch==2.13.0; on a GPU
#                   machine use the CUDA build your driver supports)
#   PIP_EXTRA_ARGS  extra arguments for every pip install (e.g. an index URL)
#   PYTEST_ARGS     extra arguments for pytest in `test` mode
#   WITH_HOROVOD    1: also build the optional Horovod backend (ops/build-horovod.sh,
#                   ~3 min, 2.4 GB while building); default 1 in `test` mode (its tests
#                   run there), 0 otherwise
#   WITH_CUDA_GATE  1 (default): also make .venv-cuda, the CUDA build of torch for the fake-CUDA
#                   gate (ops/make-cuda-venv.sh, 2.7 GB download, 1-12 min here depending on
#                   load); 0 leaves it out (the gate's tests then skip, also under CI=true)
set -euo pipefail

mode="${1:-}"
case "$mode" in
  demo|test|setup|stamp) ;;
  *) echo "usage: bash ops/quickstart.sh demo|test|setup" >&2; exit 2 ;;
esac

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="$repo/.venv"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
read -r -a pip_extra <<<"${PIP_EXTRA_ARGS:-}"
if [ "$mode" = test ]; then WITH_HOROVOD="${WITH_HOROVOD:-1}"; else WITH_HOROVOD="${WITH_HOROVOD:-0}"; fi
WITH_CUDA_GATE="${WITH_CUDA_GATE:-1}"
export WITH_CUDA_GATE  # the gate's tests read it: 0 is a deliberate opt-out, not a missing venv

log() { printf '\033[1m[quickstart]\033[0m %s\n' "$*" >&2; }

# What the Python environment was built from; a change re-runs the pip step.  The op extension's
# sources are part of it: after a C++/CUDA change an existing venv would otherwise keep the stale
# library, and the loader would fall back to the slow references.
setup_stamp() {
  echo "$({ cat setup.cfg setup.py pyproject.toml ops/quickstart.sh ops/build-horovod.sh
            find mpirun_kit/maskrcnn/csrc -type f -print0 | LC_ALL=C sort -z | xargs -0 cat
          } | sha256sum | cut -c1-16) $TORCH_SPEC"
}
if [ "$mode" = stamp ]; then setup_stamp; exit 0; fi  # for the tests

if [ "$(id -u)" != 0 ]; then
  echo "quickstart: run as root (it installs Debian packages and the simulated cluster needs network namespaces)" >&2
  exit 1
fi

# --- Debian packages ---------------------------------------------------------
apt_pkgs=(
  python3 python3-venv python3-dev python3-pip g++ make git ca-certificates
  openssh-server openssh-client       # sshd on every host, ssh for mpirun
  openmpi-bin libopenmpi-dev          # Open MPI 4.1: mpirun, orted; headers for mpi4py
  iproute2 util-linux procps          # ip netns, unshare, nsenter: the simulated cluster
  elfutils gdb                        # eu-stack, gdb: native stacks and a rank's exit out of MPI_Finalize (observe/stacks.py)
  slurmctld slurmd slurm-client slurmdbd munge mariadb-server  # sim up --slurm: a real Slurm 22.05 (target slurm)
)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python environment ------------------------------------------------------
stamp="$venv/.quickstart-stamp"
want="$(setup_stamp)"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
  log "creating $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  pip=("$venv/bin/python" -m pip install -q "${pip_extra[@]}")
  log "installing $TORCH_SPEC"
  # ninja: BuildExtension compiles the C++ op extension in parallel (MAX_JOBS) and incrementally with it
  "${pip[@]}" "setuptools>=64" wheel ninja "$TORCH_SPEC"
  log "installing mpirun_kit and its test dependencies (compiles the C++ op extension)"
  # No build isolation: the extension must compile against the torch installed above.
  "${pip[@]}" --no-build-isolation -e ".[test]"
  # A package that installed without its ops would run every detection op on
  # the slow reference path; stop here, with the loader's original error.
  "$venv/bin/python" -c 'from mpirun_kit.maskrcnn.ops._loader import active; active().require()'
  # --- checkov (static checks of cfn/ in the test suite) ------------------------
  # Its own venv: checkov pins its own boto3, which must not replace ours.
  if [ ! -x "$repo/.venv-checkov/bin/checkov" ]; then
    log "installing checkov into .venv-checkov (static checks of the cfn/ templates)"
    python3 -m venv "$repo/.venv-checkov"
    "$repo/.venv-checkov/bin/python" -m pip install -q "${pip_extra[@]}" checkov==3.3.30
  fi
  echo "$want" >"$stamp"
fi
# The CUDA build of torch for the fake-CUDA gate (tests/maskrcnn/test_maskrcnn_gpu_path.py): its own
# venv, like checkov's; outside the stamp (the script keeps its own), so it is made once.
if [ "$WITH_CUDA_GATE" = 1 ]; then
  bash "$repo/ops/make-cuda-venv.sh" "$repo/.venv-cuda"
fi
# Outside the stamp: a set-up made without Horovod gains it on a later WITH_HOROVOD=1 run.
if [ "$WITH_HOROVOD" = 1 ] && ! "$venv/bin/python" -c 'import horovod.torch' 2>/dev/null; then
  log "building the optional Horovod backend (WITH_HOROVOD=0 skips it)"
  bash "$repo/ops/build-horovod.sh" "$venv/bin/python"
fi
export PATH="$venv/bin:$PATH"

case "$mode" in
  setup)
    log "set up; activate with: source .venv/bin/activate"
    ;;
  demo)
    log "running jobs/maskrcnn-demo.yaml"
    exec mpirun_kit submit jobs/maskrcnn-demo.yaml
    ;;
  test)
    log "running the test suite"
    read -r -a pytest_extra <<<"${PYTEST_ARGS:-}"
    set +e
    python -m pytest "${pytest_extra[@]}"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then
      echo "quickstart: pytest collected no tests; that is a failure" >&2
      exit 1
    fi
    exit "$rc"
    ;;
esac
