#!/usr/bin/env bash
# ENTRYPOINT of the mpirun_kit training image (installed as /usr/local/bin/mpirun-kit-entry,
# run under tini so orphaned MPI daemons are reaped and signals reach us).
#
# SageMaker starts every host of a training job as `docker run IMAGE train`;
# `train` installs the job's ssh keys (`mpirun_kit keys install --sagemaker`) and
# becomes the per-host entrypoint (`mpirun_kit entrypoint`), which reads
# /opt/ml/input/config, elects the master and runs or serves mpirun.  Anything
# else runs as given, so `docker run IMAGE mpirun_kit doctor` works for operators.
set -euo pipefail

if [ "$#" -eq 0 ]; then
  echo "mpirun-kit-entry: no command; expected 'train' (SageMaker) or a command to run, e.g. 'mpirun_kit doctor'" >&2
  exit 64
fi
if [ "$1" = train ]; then
  shift
  # The job's ssh keys, host key and sshd listen address, before anything starts sshd.
  # A no-op off SageMaker and on a single-host job without a job secret.
  mpirun_kit keys install --sagemaker
  # exec: the entrypoint becomes tini's child, so SIGTERM from SageMaker reaches it directly.
  exec mpirun_kit entrypoint "$@"
fi
exec "$@"
