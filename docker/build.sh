#!/usr/bin/env bash
# Builds the mpirun_kit training image (docker/Dockerfile) and pushes it to ECR.
#
#   bash docker/build.sh [--region R] [--account ID] [--repository NAME] [--no-push] [--dry-run]
#
# The tag is the package version (mpirun_kit/__init__.py), so an image name says
# which mpirun_kit it runs; a build from a tree with uncommitted changes gets
# "-dirty" appended so it can never overwrite a clean release tag.
# --dry-run prints every command exactly as it would run (no docker, no AWS calls);
# it needs --account because finding the account is itself an AWS call.
#
# Exit codes: 0 ok; 2 usage; 64 bad input (no version found); otherwise the
# failing command's own code.
set -euo pipefail

usage() {
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

region="${AWS_REGION:-${AWS_DEFAULT_REGION:-}}"
account=""
repository="mpirun-kit"
push=1
dry_run=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --region) region="${2:?--region needs a value}"; shift 2 ;;
    --account) account="${2:?--account needs a value}"; shift 2 ;;
    --repository) repository="${2:?--repository needs a value}"; shift 2 ;;
    --no-push) push=0; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build.sh: unknown argument '$1'" >&2; usage; exit 2 ;;
  esac
done

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo_root/mpirun_kit/__init__.py")"
if [ -z "$version" ]; then
  echo "build.sh: no __version__ = \"...\" line in $repo_root/mpirun_kit/__init__.py; the image tag is the package version" >&2
  exit 64
fi
tag="$version"
if git -C "$repo_root" rev-parse --git-dir >/dev/null 2>&1 && [ -n "$(git -C "$repo_root" status --porcelain --untracked-files=no)" ]; then
  tag="${version}-dirty"
fi

# Print a command the way a shell would read it back, then run it (unless --dry-run).
run() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [ "$dry_run" = 0 ]; then "$@"; fi
}

if [ "$push" = 1 ]; then
  if [ -z "$region" ]; then
    echo "build.sh: no AWS region; pass --region (e.g. --region us-west-2) or set AWS_REGION, or use --no-push" >&2
    exit 2
  fi
  if [ -z "$account" ]; then
    if [ "$dry_run" = 1 ]; then
      echo "build.sh: --dry-run needs --account ID (looking the account up is an AWS call)" >&2
      exit 2
    fi
    account="$(aws sts get-caller-identity --query Account --output text)"
  fi
  image="${account}.dkr.ecr.${region}.amazonaws.com/${repository}:${tag}"
else
  image="${repository}:${tag}"
fi

run docker build --file "$repo_root/docker/Dockerfile" --tag "$image" \
  --label "org.opencontainers.image.version=$version" "$repo_root"

if [ "$push" = 1 ]; then
  registry="${image%%/*}"
  if [ "$dry_run" = 0 ] && ! aws ecr describe-repositories --region "$region" --repository-names "$repository" >/dev/null 2>&1; then
    run aws ecr create-repository --region "$region" --repository-name "$repository" \
      --image-scanning-configuration scanOnPush=true
  fi
  # The password goes through a pipe, never through argv or a file.
  printf '+ aws ecr get-login-password --region %q | docker login --username AWS --password-stdin %q\n' "$region" "$registry"
  if [ "$dry_run" = 0 ]; then
    aws ecr get-login-password --region "$region" | docker login --username AWS --password-stdin "$registry"
  fi
  run docker push "$image"
fi
echo "$image"
