#!/usr/bin/env bash
# Creates the per-job ssh key material: one fresh job secret from which every host
# of the job derives the same ssh user key and host key (mpirun_kit keys; threat
# model in docs/threat-model.md, "Per-job ssh keys and their threat model").
# A SageMaker job submitted with `mpirun_kit submit` needs none of this: submit makes
# the secret under keys/<job>/ only where no object is, refuses a job whose secret it
# did not make, and removes it after the job; this script refuses that prefix.
#
#   bash ops/make-job-keys.sh --job NAME --out DIR                 # local / FSx / EFS directory
#   bash ops/make-job-keys.sh --job NAME --out s3://B/PREFIX/NAME/  # S3 (not keys/), SSE-KMS
#        [--kms-key-id KEY] [--region R] [--force] [--dry-run]
#   bash ops/make-job-keys.sh --job NAME --out ... --delete        # after the job: remove its secret
#
# The secret is written as DIR/job-secret (mode 600, directory 700) or uploaded as
# s3://B/PREFIX/NAME/job-secret, for a job you create yourself; pass that prefix to
# the job as input channel "mpirun-keys" so it appears on every host at
# /opt/ml/input/data/mpirun-keys/job-secret.  An S3 prefix must end in the job name,
# so each secret gets a prefix of its own, deleted with --delete once the job has
# ended (--delete also removes a leftover under keys/).  Use a new secret per job;
# the public fingerprints printed here are what the hosts will present.
#
# Exit codes: 0 ok; 2 usage; 64 bad input (the CLI's message says which);
# otherwise the failing command's own code.
set -euo pipefail

usage() { sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

job="" out="" kms="" region="${AWS_REGION:-${AWS_DEFAULT_REGION:-}}" force=0 dry_run=0 delete=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --job) job="${2:?--job needs a value}"; shift 2 ;;
    --out) out="${2:?--out needs a value}"; shift 2 ;;
    --kms-key-id) kms="${2:?--kms-key-id needs a value}"; shift 2 ;;
    --region) region="${2:?--region needs a value}"; shift 2 ;;
    --force) force=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    --delete) delete=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "make-job-keys.sh: unknown argument '$1'" >&2; usage; exit 2 ;;
  esac
done
if [ -z "$job" ] || [ -z "$out" ]; then
  echo "make-job-keys.sh: --job NAME and --out DIR|s3://BUCKET/PREFIX are required" >&2
  exit 2
fi

run() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [ "$dry_run" = 0 ]; then "$@"; fi
}

case "$out" in
  s3://*)
    last="${out%/}"; last="${last##*/}"
    if [ "$last" != "$job" ]; then
      echo "make-job-keys.sh: --out $out: an S3 prefix must end in the job name ($job), e.g. ${out%/}/$job/;" \
           "the role lets each job read only the key prefix of its own name, so each secret needs a prefix of its own" >&2
      exit 64
    fi
    case "/${out#s3://*/}" in
      */keys/*)
        if [ "$delete" = 0 ]; then
          echo "make-job-keys.sh: --out $out: a SageMaker job's key prefix is filled by \`mpirun_kit submit\` itself," \
               "which makes the secret only where no object is and refuses a job whose secret it did not make;" \
               "a secret put there first stops the submit. Submit the job without this script (it makes and," \
               "with --wait, removes the secret), or, for a job you create yourself, upload outside keys/" >&2
          exit 64
        fi ;;
    esac
    ;;
esac

if [ "$delete" = 1 ]; then
  # After the job: its hosts read the secret only at start, so nothing needs it any more.
  case "$out" in
    s3://*)
      rm_args=(aws s3 rm "${out%/}/job-secret" --only-show-errors)
      if [ -n "$region" ]; then rm_args+=(--region "$region"); fi
      run "${rm_args[@]}" ;;
    *) run rm -f "${out%/}/job-secret" ;;
  esac
  if [ "$dry_run" = 0 ]; then echo "job secret ${out%/}/job-secret deleted" >&2; fi
  exit 0
fi

# The secret exists in one private temporary directory until it reaches --out.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 700 "$work"
secret="$work/job-secret"

run mpirun_kit keys new --out "$secret"
if [ "$dry_run" = 0 ]; then
  # Derive once here: a bad job name fails now, not on the cluster.
  mpirun_kit keys show --secret-file "$secret" --job "$job"
fi

case "$out" in
  s3://*)
    dest="${out%/}/job-secret"
    cp_args=(aws s3 cp "$secret" "$dest" --only-show-errors --sse aws:kms)
    if [ -n "$kms" ]; then cp_args+=(--sse-kms-key-id "$kms"); fi
    if [ -n "$region" ]; then cp_args+=(--region "$region"); fi
    run "${cp_args[@]}"
    echo "job secret uploaded to $dest; pass ${out%/}/ as input channel 'mpirun-keys';" \
         "after the job: bash ops/make-job-keys.sh --job $job --out ${out%/}/ --delete" >&2
    ;;
  *)
    dest="${out%/}/job-secret"
    if [ -e "$dest" ] && [ "$force" = 0 ]; then
      echo "make-job-keys.sh: $dest exists; use a new directory per job (or --force to replace it)" >&2
      exit 64
    fi
    run install -d -m 700 "$out"
    run install -m 600 "$secret" "$dest"
    echo "job secret written to $dest" >&2
    ;;
esac
