"""ops/*.sh as real processes: staging a small COCO-format dataset made here, the
per-job key script through the real CLI, the benchmark script's dry run.  S3 paths
are exercised with --dry-run only (no AWS account is reachable)."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPS = REPO / "ops"
ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}


def sh(script: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(OPS / script), *args], capture_output=True, text=True, env=ENV,
                          timeout=120, cwd=cwd)


def make_coco(root: Path, counts=(("train", 3), ("val", 2))) -> Path:
    """A tiny COCO-format dataset: a few image files and one annotation file per split."""
    (root / "annotations").mkdir(parents=True)
    for split, n in counts:
        (root / split).mkdir()
        images = []
        for i in range(n):
            name = f"{i:012d}.png"
            (root / split / name).write_bytes(b"\x89PNG\r\n\x1a\n" + bytes([i]))
            images.append({"id": i + 1, "file_name": name, "width": 8, "height": 8})
        ann = {"images": images, "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2],
                                                  "area": 4, "iscrowd": 0, "segmentation": [[0, 0, 2, 0, 2, 2]]}],
               "categories": [{"id": 1, "name": "circle"}]}
        (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(ann))
    return root


def test_scripts_are_strict_and_call_no_internals():
    for script in ("stage-coco.sh", "make-job-keys.sh", "run-allreduce-bench.sh", "build-horovod.sh",
                   "check-cuda-build.sh"):
        text = (OPS / script).read_text()
        assert "set -euo pipefail" in text, script
        assert "import mpirun_kit" not in text and "python -m mpirun_kit" not in text, script
        assert os.access(OPS / script, os.X_OK), script


def test_stage_local_dataset_and_verify(tmp_path):
    src = make_coco(tmp_path / "src")
    dst = tmp_path / "fsx" / "coco"
    proc = sh("stage-coco.sh", "--splits", "train,val", str(src), str(dst))
    assert proc.returncode == 0, proc.stderr
    assert "stage-coco: train: 3 files, 3 images annotated" in proc.stderr
    assert "stage-coco: val: 2 files, 2 images annotated" in proc.stderr
    assert sorted(p.name for p in (dst / "train").iterdir()) == sorted(p.name for p in (src / "train").iterdir())
    manifest = (dst / "coco-manifest.sha256").read_text().splitlines()
    assert [line.split()[1] for line in manifest] == ["annotations/instances_train.json",
                                                      "annotations/instances_val.json"]
    # Idempotent, and the staged copy verifies on its own later.
    assert sh("stage-coco.sh", "--splits", "train,val", str(src), str(dst)).returncode == 0
    assert sh("stage-coco.sh", "--splits", "train,val", "--verify-only", str(dst)).returncode == 0


def test_verify_catches_a_changed_annotation_file(tmp_path):
    src = make_coco(tmp_path / "src")
    dst = tmp_path / "dst"
    assert sh("stage-coco.sh", "--splits", "train,val", str(src), str(dst)).returncode == 0
    ann = dst / "annotations" / "instances_val.json"
    ann.write_text(ann.read_text().replace('"circle"', '"circel"'))
    proc = sh("stage-coco.sh", "--splits", "train,val", "--verify-only", str(dst))
    assert proc.returncode == 1
    assert f"verification failed: annotation checksums differ from {dst}/coco-manifest.sha256" in proc.stderr


def test_verify_catches_a_missing_image(tmp_path):
    src = make_coco(tmp_path / "src")
    dst = tmp_path / "dst"
    assert sh("stage-coco.sh", "--splits", "train,val", str(src), str(dst)).returncode == 0
    (dst / "train" / "000000000001.png").unlink()
    proc = sh("stage-coco.sh", "--splits", "train,val", "--verify-only", str(dst))
    assert proc.returncode == 1
    assert (f"verification failed: train has 2 files in {dst}/train, but annotations/instances_train.json "
            "lists 3 images") in proc.stderr


def test_stage_rejects_a_source_that_is_not_coco(tmp_path):
    src = make_coco(tmp_path / "src")
    proc = sh("stage-coco.sh", str(src), str(tmp_path / "dst"))  # default splits train2017,val2017
    assert proc.returncode == 64
    assert (f"{src} is not a COCO-format dataset for split 'train2017': expected {src}/train2017/ and "
            f"{src}/annotations/instances_train2017.json") in proc.stderr
    assert not (tmp_path / "dst").exists()


def test_stage_to_s3_dry_run_prints_the_sync(tmp_path):
    src = make_coco(tmp_path / "src", counts=(("train2017", 1), ("val2017", 1)))
    proc = sh("stage-coco.sh", "--dry-run", str(src), "s3://bucket/coco/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"+ aws s3 sync {src} s3://bucket/coco --only-show-errors --exclude \\* --include train2017/\\* "
        "--include annotations/instances_train2017.json --include val2017/\\* "
        "--include annotations/instances_val2017.json"]


@pytest.mark.parametrize("args, message", [
    ((), "expected SRC and DST, got 0 argument(s)"),
    (("--verify-only", "a", "b"), "--verify-only takes one argument, DST"),
    (("--bogus", "a", "b"), "unknown option '--bogus'"),
])
def test_stage_usage_errors(args, message):
    proc = sh("stage-coco.sh", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_make_job_keys_local(tmp_path):
    out = tmp_path / "keys" / "job-1"
    proc = sh("make-job-keys.sh", "--job", "maskrcnn-1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    secret = out / "job-secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert re.fullmatch(r"[0-9a-f]{64}\n", secret.read_text())
    # The fingerprints printed are the ones every host will derive from the file.
    shown = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "keys", "show", "--json",
                            "--secret-file", str(secret), "--job", "maskrcnn-1"],
                           capture_output=True, text=True, check=True, env=ENV).stdout
    assert json.loads(shown)["user_fingerprint"] in proc.stdout
    assert "job:        maskrcnn-1" in proc.stdout
    again = sh("make-job-keys.sh", "--job", "maskrcnn-1", "--out", str(out))
    assert again.returncode == 64
    assert f"{secret} exists; use a new directory per job (or --force to replace it)" in again.stderr


def test_make_job_keys_s3_dry_run():
    proc = sh("make-job-keys.sh", "--job", "j", "--out", "s3://bucket/jobs/j/", "--kms-key-id", "alias/mk",
              "--region", "us-west-2", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"\+ mpirun_kit keys new --out /tmp/tmp\.\w+/job-secret", lines[0])
    assert re.fullmatch(r"\+ aws s3 cp /tmp/tmp\.\w+/job-secret s3://bucket/jobs/j/job-secret --only-show-errors "
                        r"--sse aws:kms --sse-kms-key-id alias/mk --region us-west-2", lines[1])


def test_make_job_keys_errors(tmp_path):
    proc = sh("make-job-keys.sh", "--job", "j")
    assert proc.returncode == 2
    assert "--job NAME and --out DIR|s3://BUCKET/PREFIX are required" in proc.stderr
    bad = sh("make-job-keys.sh", "--job", "a b", "--out", str(tmp_path / "k"))
    assert bad.returncode == 64
    assert "job name 'a b': expected a non-empty name without whitespace" in bad.stderr
    assert not (tmp_path / "k").exists()


def test_run_allreduce_bench_dry_run_validates_and_plans():
    proc = sh("run-allreduce-bench.sh", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"+ mpirun_kit validate {REPO}/jobs/allreduce-bench.yaml" in proc.stderr
    assert f"+ mpirun_kit plan {REPO}/jobs/allreduce-bench.yaml" in proc.stderr
    assert "job allreduce-bench" in proc.stdout
    bad = sh("run-allreduce-bench.sh", "--frob")
    assert bad.returncode == 2 and "unknown argument '--frob'" in bad.stderr


def _fake_horovod_sdist(tmp_path: Path, version: str, top_cmake: str) -> Path:
    """A horovod-VERSION.tar.gz holding only the two CMake files the build script patches."""
    import tarfile

    src = tmp_path / f"horovod-{version}"
    (src / "horovod/torch").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(top_cmake)
    (src / "horovod/torch/CMakeLists.txt").write_text("set(CMAKE_CXX_STANDARD 14)\n")
    out = tmp_path / f"horovod-{version}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(src, arcname=src.name)
    return out


def test_build_horovod_usage_and_sdist_errors(tmp_path):
    proc = sh("build-horovod.sh")
    assert proc.returncode == 2
    assert "usage: bash ops/build-horovod.sh PYTHON  (the interpreter of the environment with torch; got '')" in proc.stderr
    missing = subprocess.run(["bash", str(OPS / "build-horovod.sh"), sys.executable], capture_output=True, text=True,
                             env={**ENV, "HOROVOD_SDIST": str(tmp_path / "nope.tar.gz")}, timeout=60)
    assert missing.returncode == 2
    assert f"HOROVOD_SDIST={tmp_path / 'nope.tar.gz'} is not a file; point it at a horovod-0.28.1.tar.gz" in missing.stderr
    other = _fake_horovod_sdist(tmp_path, "0.29.0", "set(CMAKE_CXX_STANDARD 14)\n")
    wrong = subprocess.run(["bash", str(OPS / "build-horovod.sh"), sys.executable], capture_output=True, text=True,
                           env={**ENV, "HOROVOD_SDIST": str(other)}, timeout=60)
    assert wrong.returncode == 2
    assert f"{other} does not unpack to horovod-0.28.1/; set HOROVOD_VERSION to its version" in wrong.stderr


def test_build_horovod_refuses_a_source_it_cannot_patch(tmp_path):
    # a future release that no longer pins C++14 must fail before building, not build unpatched
    sdist = _fake_horovod_sdist(tmp_path, "0.28.1", "set(CMAKE_CXX_STANDARD 20)\n")
    proc = subprocess.run(["bash", str(OPS / "build-horovod.sh"), sys.executable], capture_output=True, text=True,
                          env={**ENV, "HOROVOD_SDIST": str(sdist)}, timeout=60)
    assert proc.returncode == 1
    assert ("build-horovod: CMakeLists.txt of horovod 0.28.1 has no 'set(CMAKE_CXX_STANDARD 14)' line to patch; "
            "check whether this version still needs the C++17 patch (HOROVOD_VERSION=0.28.1)") in proc.stderr


def test_check_cuda_build_needs_nvcc(tmp_path):
    proc = subprocess.run(["bash", str(OPS / "check-cuda-build.sh"), str(tmp_path / "venv")], capture_output=True,
                          text=True, env={**ENV, "CUDA_HOME": str(tmp_path / "no-cuda")}, timeout=60)
    assert proc.returncode == 2
    assert f"no nvcc at {tmp_path / 'no-cuda'}/bin/nvcc; install the CUDA toolkit or set CUDA_HOME" in proc.stderr
    assert not (tmp_path / "venv").exists()


def test_quickstart_setup_stamp_changes_with_the_op_sources(tmp_path):
    """A C++/CUDA change must re-run the pip step: an existing venv would keep a stale extension."""
    import shutil

    for name in ("setup.cfg", "setup.py", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(OPS, tmp_path / "ops")
    shutil.copytree(REPO / "mpirun_kit" / "maskrcnn" / "csrc", tmp_path / "mpirun_kit" / "maskrcnn" / "csrc")

    def stamp() -> str:
        r = subprocess.run(["bash", str(tmp_path / "ops" / "quickstart.sh"), "stamp"], capture_output=True,
                           text=True, env=ENV, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    before = stamp()
    assert re.fullmatch(r"[0-9a-f]{16} \S+", before), before
    assert stamp() == before
    kernel = tmp_path / "mpirun_kit" / "maskrcnn" / "csrc" / "ops" / "cpu" / "nms_kernel.cpp"
    kernel.write_text(kernel.read_text() + "\n// changed\n")
    assert stamp() != before


def test_make_job_keys_leaves_the_key_prefix_to_submit():
    """Issue 37: `submit` puts a SageMaker job's secret under keys/NAME/ only where no object is, and refuses one it
    did not make; the script still told people to pre-stage it there, which now stops their submit.  It refuses
    that upload (exit 64, before any command) and says what to do; removing a leftover there stays possible."""
    proc = sh("make-job-keys.sh", "--job", "alice--j", "--out", "s3://bucket/mpirun-kit/keys/alice--j/", "--dry-run")
    assert (proc.returncode, proc.stdout) == (64, "")
    assert proc.stderr == (
        "make-job-keys.sh: --out s3://bucket/mpirun-kit/keys/alice--j/: a SageMaker job's key prefix is filled by "
        "`mpirun_kit submit` itself, which makes the secret only where no object is and refuses a job whose secret "
        "it did not make; a secret put there first stops the submit. Submit the job without this script (it makes "
        "and, with --wait, removes the secret), or, for a job you create yourself, upload outside keys/\n")
    gone = sh("make-job-keys.sh", "--job", "alice--j", "--out", "s3://bucket/mpirun-kit/keys/alice--j/", "--delete",
              "--dry-run")
    assert gone.returncode == 0 and gone.stdout.startswith("+ aws s3 rm s3://bucket/mpirun-kit/keys/alice--j/job-secret")
