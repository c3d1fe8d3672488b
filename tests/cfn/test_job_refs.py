"""The ${stack:NAME.OutputKey} references in jobs/*.yaml name outputs our templates really have.

Stack names follow the README's deployment: mrk-vpc, mrk-fsx, mrk-efs, mrk-role.
"""
from __future__ import annotations

import re
from pathlib import Path

from mpirun_kit.stack import load_template

REPO = Path(__file__).resolve().parents[2]
STACK_TEMPLATES = {"mrk-vpc": "cfn/vpc.yaml", "mrk-fsx": "cfn/fsx.yaml", "mrk-efs": "cfn/efs.yaml",
                   "mrk-role": "cfn/sagemaker-role.yaml"}
REF = re.compile(r"\$\{stack:([A-Za-z0-9-]+)\.([A-Za-z0-9]+)\}")


def test_job_stack_refs_match_template_outputs():
    refs = sorted({m.groups() for p in (REPO / "jobs").glob("*.yaml") for m in REF.finditer(p.read_text())})
    assert ("mrk-fsx", "LustreMountName") in refs  # jobs/maskrcnn.yaml reads the FSx stack
    unknown = []
    for stack, key in refs:
        template = STACK_TEMPLATES.get(stack)
        outputs = load_template(str(REPO / template)).parsed.get("Outputs", {}) if template else {}
        if key not in outputs:
            unknown.append((stack, key))
    assert unknown == []
