"""Static checks over cfn/: cfn-lint with warnings as errors, and checkov offline.

Each check is also run on a seeded bad template to prove it can fail.  checkov lives in
its own venv (.venv-checkov, made by ops/quickstart.sh) because it pins its own boto3;
without it the test skips here, but fails in CI (CI=true).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun_kit.stack import load_template

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(str(p) for p in (REPO / "cfn").glob("*.yaml"))
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"


def cfn_lint(*paths: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("cfn-lint")
    return subprocess.run([str(exe), "--non-zero-exit-code", "warning", "--format", "parseable", *paths],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def test_cfn_lint_clean_with_warnings_as_errors():
    assert len(TEMPLATES) == 4
    r = cfn_lint(*TEMPLATES)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr


def test_cfn_lint_catches_a_seeded_typo():
    r = cfn_lint("tests/cfn/bad/lint-typo.yaml")
    assert r.returncode != 0
    assert ":E3002:" in r.stdout and "EnableDnsHostname" in r.stdout


BAD_EFS = "tests/cfn/bad/efs-unencrypted.yaml"


@pytest.fixture(scope="module")
def checkov_report() -> dict:
    """One checkov run over every template plus the seeded bad one (each run costs ~8 s)."""
    if not CHECKOV.exists():
        reason = f"{CHECKOV} missing: run `bash ops/quickstart.sh setup` (installs checkov in its own venv)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    files = [str(Path(p).relative_to(REPO)) for p in TEMPLATES] + [BAD_EFS]
    r = subprocess.run([str(CHECKOV), "--framework", "cloudformation", "--skip-download", "--output", "json",
                        "--quiet", "--file", *files], capture_output=True, text=True, timeout=300, cwd=REPO)
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"checkov printed no JSON (rc {r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
    return report[0] if isinstance(report, list) else report


def _failed(report: dict) -> list[tuple[str, str, str]]:
    return [(f["check_id"], f["file_path"].lstrip("/"), f["resource"]) for f in report["results"]["failed_checks"]]


def test_checkov_no_failed_checks(checkov_report):
    assert checkov_report["summary"]["passed"] >= 40  # the templates were really scanned
    assert [f for f in _failed(checkov_report) if not f[1].startswith("tests/")] == []


def test_checkov_catches_unencrypted_efs(checkov_report):
    assert ("CKV_AWS_42", BAD_EFS, "AWS::EFS::FileSystem.Shared") in _failed(checkov_report)


def test_every_checkov_suppression_has_a_written_reason():
    unexplained = []
    for path in TEMPLATES:
        for lid, res in load_template(path).resources.items():
            for skip in ((res.get("Metadata") or {}).get("checkov") or {}).get("skip") or ():
                if len(str(skip.get("comment", "")).split()) < 3:
                    unexplained.append((Path(path).name, lid, skip.get("id")))
    assert unexplained == []


def test_cfn_lint_clean_in_a_china_and_a_govcloud_region():
    """Issue 26: the templates deploy in every partition (cfn-lint checks resource types and values there)."""
    r = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), "--non-zero-exit-code", "warning", "--format",
                        "parseable", "--regions", "cn-north-1", "us-gov-west-1", "--", *TEMPLATES],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr


def test_no_partition_or_domain_is_hard_coded():
    """cfn-lint does not flag a literal amazonaws.com or arn:aws: (wrong in aws-cn and aws-us-gov): every ARN
    takes ${AWS::Partition} and every domain ${AWS::URLSuffix}. Before issue 26 sagemaker-role.yaml had
    sagemaker.amazonaws.com, s3.${AWS::Region}.amazonaws.com and the ECR host under amazonaws.com.
    (com.amazonaws.REGION.s3 is a VPC endpoint service name, the same in every partition, not a domain.)"""
    import re

    hits = []
    for path in TEMPLATES:
        for i, line in enumerate(Path(path).read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"(?<!com\.)amazonaws\.com|arn:aws:", code):
                hits.append(f"{Path(path).name}:{i}: {line.strip()}")
    assert hits == []
