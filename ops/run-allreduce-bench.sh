#!/usr/bin/env bash
# Runs the all-reduce bus-bandwidth benchmark job (jobs/allreduce-bench.yaml):
# validate the spec, check the hosts with `mpirun_kit doctor`, then submit it.
#
#   bash ops/run-allreduce-bench.sh [--target sim|local|ssh|sagemaker] [--hosts H1,H2,...]
#        [--spec FILE] [--dry-run] [-- EXTRA SUBMIT ARGS]
#
# --hosts   also run `mpirun_kit doctor --hosts ...` before submitting (ssh targets;
#           the doctor's own allreduce is a 5-iteration smoke test, the job is the benchmark)
# --dry-run validate and print the job's plan (`mpirun_kit plan`); submit nothing
#
# Exit codes: those of the mpirun_kit command that failed (64 bad spec, 69 host
# unreachable, 1 a doctor check failed, 1-63 the job's own code); 2 usage.
set -euo pipefail

usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
spec="$repo/jobs/allreduce-bench.yaml"
target="" hosts="" dry_run=0 extra=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --target) target="${2:?--target needs a value}"; shift 2 ;;
    --hosts) hosts="${2:?--hosts needs a value}"; shift 2 ;;
    --spec) spec="${2:?--spec needs a value}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run-allreduce-bench.sh: unknown argument '$1'" >&2; usage; exit 2 ;;
  esac
done

target_args=()
if [ -n "$target" ]; then target_args=(--target "$target"); fi

run() { { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2; "$@"; }

run mpirun_kit validate "$spec"
if [ -n "$hosts" ]; then
  run mpirun_kit doctor --hosts "$hosts"
fi
if [ "$dry_run" = 1 ]; then
  run mpirun_kit plan "$spec" "${target_args[@]}"
else
  run mpirun_kit submit "$spec" "${target_args[@]}" "${extra[@]}"
fi
