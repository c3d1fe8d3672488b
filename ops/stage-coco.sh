#!/usr/bin/env bash
# Stages a COCO-format dataset where a job reads it, then verifies the copy.
#
#   bash ops/stage-coco.sh [--splits train2017,val2017] [--dry-run] SRC DST
#   bash ops/stage-coco.sh [--splits ...] --verify-only DST
#
# SRC, DST: a directory (local disk, an FSx for Lustre or EFS mount) or s3://BUCKET/PREFIX
# (copied with `aws s3 sync`).  Layout, as the Mask R-CNN job expects it:
#   DST/<split>/...                          images of each split
#   DST/annotations/instances_<split>.json  one annotation file per split
# Verification, for a directory DST: each split has as many files as its annotation
# file lists images (and as many as SRC has, for a directory SRC), and every
# annotation file's sha256 equals SRC's.  The result is recorded in
# DST/coco-manifest.sha256 (sha256sum format), which --verify-only checks again.
#
# Exit codes: 0 staged and verified; 1 verification failed (counts or checksums
# differ: the message names the split or file); 2 usage; 64 bad input (SRC is not
# in the layout above); otherwise the failing copy command's own code.
set -euo pipefail

usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

splits="train2017,val2017" dry_run=0 verify_only=0 args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --splits) splits="${2:?--splits needs a value}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --verify-only) verify_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "stage-coco.sh: unknown option '$1'" >&2; usage; exit 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
IFS=',' read -r -a split_list <<<"$splits"
if [ "$verify_only" = 1 ]; then
  [ "${#args[@]}" = 1 ] || { echo "stage-coco.sh: --verify-only takes one argument, DST" >&2; exit 2; }
  src="" dst="${args[0]%/}"
else
  [ "${#args[@]}" = 2 ] || { echo "stage-coco.sh: expected SRC and DST, got ${#args[@]} argument(s)" >&2; usage; exit 2; }
  src="${args[0]%/}" dst="${args[1]%/}"
fi
manifest_name="coco-manifest.sha256"

log() { echo "stage-coco: $*" >&2; }
run() {
  { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2
  if [ "$dry_run" = 0 ]; then "$@"; fi
}
is_s3() { case "$1" in s3://*) return 0 ;; *) return 1 ;; esac; }
ann() { echo "annotations/instances_$1.json"; }
count_files() { find "$1" -type f ! -name '.*' | wc -l; }
# COCO puts "file_name" in image entries only: one per image.
count_images() { grep -o '"file_name"' "$1" | wc -l; }

# --- check the source layout before copying anything ---------------------------
if [ -n "$src" ] && ! is_s3 "$src"; then
  for s in "${split_list[@]}"; do
    if [ ! -d "$src/$s" ] || [ ! -f "$src/$(ann "$s")" ]; then
      echo "stage-coco.sh: $src is not a COCO-format dataset for split '$s': expected $src/$s/ and" \
           "$src/$(ann "$s"); pass the dataset root, or --splits NAMES for other split names" >&2
      exit 64
    fi
  done
fi

# --- copy ----------------------------------------------------------------------
if [ -n "$src" ]; then
  if is_s3 "$src" || is_s3 "$dst"; then
    # Only the parts the job reads: the splits' images and their annotation files.
    includes=()
    for s in "${split_list[@]}"; do includes+=(--include "$s/*" --include "$(ann "$s")"); done
    run aws s3 sync "$src" "$dst" --only-show-errors --exclude '*' "${includes[@]}"
  else
    run mkdir -p "$dst/annotations"
    for s in "${split_list[@]}"; do
      # -u: a re-run copies only what changed; staging is idempotent.
      run cp -R -u --preserve=timestamps "$src/$s" "$dst/"
      run cp -u --preserve=timestamps "$src/$(ann "$s")" "$dst/annotations/"
    done
  fi
fi
if [ "$dry_run" = 1 ]; then exit 0; fi
if is_s3 "$dst"; then
  log "staged to $dst; verification runs on a directory DST (run --verify-only on the FSx/EFS mount)"
  exit 0
fi

# --- verify --------------------------------------------------------------------
failed=0
for s in "${split_list[@]}"; do
  if [ ! -d "$dst/$s" ] || [ ! -f "$dst/$(ann "$s")" ]; then
    echo "stage-coco.sh: verification failed: $dst/$s/ or $dst/$(ann "$s") is missing" >&2
    failed=1; continue
  fi
  n_dst="$(count_files "$dst/$s")"
  n_ann="$(count_images "$dst/$(ann "$s")")"
  if [ "$n_dst" != "$n_ann" ]; then
    echo "stage-coco.sh: verification failed: $s has $n_dst files in $dst/$s, but $(ann "$s") lists $n_ann images" >&2
    failed=1
  fi
  if [ -n "$src" ] && ! is_s3 "$src"; then
    n_src="$(count_files "$src/$s")"
    if [ "$n_src" != "$n_dst" ]; then
      echo "stage-coco.sh: verification failed: $s has $n_src files in $src/$s but $n_dst in $dst/$s" >&2
      failed=1
    fi
  fi
  log "$s: $n_dst files, $n_ann images annotated"
done

manifest="$dst/$manifest_name"
if [ -f "$manifest" ] && [ -z "$src" ]; then
  # --verify-only: the annotation files must still be what was staged.
  if ! (cd "$dst" && sha256sum --check --quiet --strict "$manifest_name") >&2; then
    echo "stage-coco.sh: verification failed: annotation checksums differ from $manifest" >&2
    failed=1
  fi
elif [ -n "$src" ]; then
  for s in "${split_list[@]}"; do
    a="$(ann "$s")"
    [ -f "$dst/$a" ] || continue
    want="$( (cd "$src" && sha256sum "$a") 2>/dev/null || true)"
    [ -n "$want" ] || want="$(cd "$dst" && sha256sum "$a")"   # s3 source: record what arrived
    got="$(cd "$dst" && sha256sum "$a")"
    if [ "$want" != "$got" ]; then
      echo "stage-coco.sh: verification failed: $a checksum differs between $src and $dst" >&2
      failed=1
    fi
  done
elif [ ! -f "$manifest" ]; then
  echo "stage-coco.sh: verification failed: no $manifest; stage with SRC first" >&2
  failed=1
fi
if [ "$failed" != 0 ]; then exit 1; fi

if [ -n "$src" ]; then
  # Written last and atomically: its presence means a verified copy.
  tmp="$(mktemp "$dst/.${manifest_name}.XXXXXX")"
  (cd "$dst" && for s in "${split_list[@]}"; do sha256sum "$(ann "$s")"; done) >"$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$manifest"
fi
log "verified $dst (splits: $splits); annotation checksums in $manifest"
