#!/usr/bin/env bash
# ENTRYPOINT of the mpirun_kit training image (installed as /usr/local/bin/mpirun-kit-entry,
# run under tini so orphaned MPI daemons are reaped and signals reach us).
#
# SageMaker starts every host of a training job as `docker run IMAGE train`;
# `train` becomes the per-host entrypoint (`mpirun_kit entrypoint`), which reads
# /opt/ml/input/config, elects the master and runs or serves mpirun.  Anything
# else runs as given, so `docker run IMAGE mpirun_kit doctor` works for operators.
set -euo pipefail

if [ "$#" -eq 0 ]; then
  echo "mpirun-kit-entry: no command; expected 'train' (SageMaker) or a command to run, e.g. 'mpirun_kit doctor'" >&2
  exit 64
fi
if [ "$1" = train ]; then
  shift
  # exec: the entrypoint becomes tini's child, so SIGTERM from SageMaker reaches it directly.
  exec mpirun_kit entrypoint "$@"
fi
exec "$@"
