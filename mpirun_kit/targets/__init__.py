"""Targets: where a compiled job runs (local, sim, ssh, sagemaker), each behind one ``Target`` interface.

Each target splits into a pure ``dryrun(compiled, ...) -> DryRun`` (the request
as a printable value; ``submit --dry-run`` prints it) and ``run(dryrun) ->
Outcome``, the only side effect (torchx's submit_dryrun/schedule split); see
base.Target.  ``get_target(name)`` imports the module lazily so boto3/paramiko
load only when used, and returns its ``TARGET``.
"""
from __future__ import annotations

import importlib

from ..errors import SpecError

TARGET_MODULES = {"local": "local", "sim": "sim", "ssh": "ssh", "sagemaker": "sagemaker", "slurm": "slurm.target"}


def get_target(name: str):
    """The ``Target`` called ``name`` (base.Target: ``prepare`` -> DryRun, ``run`` -> Outcome)."""
    if name not in TARGET_MODULES:
        raise SpecError(f"target {name!r} is unknown; expected one of {sorted(TARGET_MODULES)}")
    return importlib.import_module(f"{__name__}.{TARGET_MODULES[name]}").TARGET
