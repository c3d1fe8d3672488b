"""`mpirun_kit plan JOB.yaml`: print the fully resolved plan of a job spec, run nothing.

Argument parsing and printing only: cli/resolve.py loads and compiles the spec
with this host's facts (cluster/local.py), plan/jobplan.py builds the plan on top
of the launcher's ``build_launch_plan``.  The flags, exit-code notes and quota preflight plan
shares with submit are cli/common_flags.py's.
"""
from __future__ import annotations

import os
import sys

from .common_flags import SPEC_CODE_NOTES, add_spec_args, quota_preflight, say

def cost_line(compiled) -> str | None:
    """``cost`` line of a SageMaker plan: instance-hours and the on-demand estimate (stack/cost.py)."""
    job = compiled.job
    if job.target.type != "sagemaker":
        return None
    from ..stack.cost import price_list_endpoint, training_estimate

    region = job.target.sagemaker.region
    pricing = None
    home, no_api = price_list_endpoint(region)   # the partition's endpoint; GovCloud has none: the table, said
    if home:
        import boto3
        from botocore.config import Config

        # one quick try, else the table
        try:
            pricing = boto3.client("pricing", region_name=home, config=Config(
                connect_timeout=5, read_timeout=10, retries={"max_attempts": 1}))
        except Exception:  # noqa: BLE001 - no client, no API price: the table's is used
            pricing = None
    return training_estimate(job.resources.instance_type, len(compiled.hosts), job.target.sagemaker.max_run_s,
                             region, spot=job.spot.enabled, pricing=pricing, no_api=no_api)


def _plan(args) -> int:
    from ..plan import jobplan
    from .resolve import compile_with_stack_values

    # A plan runs nothing: stacks it cannot read without AWS stay ${stack:...}, each with what resolves it.
    # A multi-host job takes this shell's allow-listed variables with it; plan names each one left behind (#40).
    compiled, facts, stack_values = compile_with_stack_values(args, offline=True, report=lambda line: say(args, line),
                                                              environ=dict(os.environ))
    short, note = quota_preflight(compiled)
    import dataclasses

    if short:
        compiled = dataclasses.replace(compiled, warnings=compiled.warnings + (short,))
    if note:
        say(args, f"note: {note}")
    local = compiled.job.target.type in ("local", "sim")
    plan = jobplan.make_job_plan(
        # Remote masters build the plan from their own environment; only local runs forward ours.
        compiled, dict(os.environ) if compiled.job.target.type == "local" else {}, topology=facts.topology if local else None,
        detected_flavour=facts.flavour if local else "openmpi4",
        run_as_root=facts.run_as_root if local else compiled.job.target.type in ("sagemaker", "sim"),
        cpu_count=facts.cpu_count if local else None, python=compiled.launch.program[0]
        if compiled.job.program.module else sys.executable, stack_values=stack_values)
    print(jobplan.to_json(plan) if args.json else jobplan.render(plan), end="" if not args.json else "\n")
    if not args.json:
        from ..workloads import plan_note  # e.g. the Mask R-CNN schedule at this world size

        note = plan_note(compiled.job.program.module, plan.launch.program, len(plan.launch.ranks))
        if note:
            print("  " + note)
    cost = cost_line(compiled)
    if cost and not args.json:
        print(f"  cost       {cost}")
    if compiled.job.target.type == "slurm" and not args.json:
        print(slurm_script(compiled), end="")
    return 0


def slurm_script(compiled) -> str:
    """What a Slurm job runs is the batch script the target writes (its ranks start from the batch step, with srun
    or mpirun inside the allocation): the target's dry run, the script whole, as ``submit --dry-run`` prints it."""
    import textwrap

    from ..targets import get_target

    dry = get_target("slurm").prepare(compiled)
    how = ("with srun --mpi=pmix, not the mpirun argv above" if compiled.job.target.slurm.launch == "srun"
           else "with mpirun inside the allocation")
    return (f"  slurm      the batch script and request submit writes: the ranks start from its batch step {how} "
            "(the run directory's name is chosen again at submit)\n" + textwrap.indent(dry.render(), "    "))


def register(subparsers) -> None:
    from ..errors import ExitCode
    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "plan", help="print the fully resolved plan of a job spec (hosts, rank map, argv, env, tuning)",
        description="Validate JOB.yaml, resolve ${stack:...} outputs, apply the NCCL/EFA preset under your env, "
                    "and print what would run, each fact once: the stack outputs used, hosts and slots, "
                    "rank -> host -> GPU -> CPU set (identical rows merged into ranges), the tuning applied and "
                    "why, the ranks' environment with where each variable came from (secrets redacted), the "
                    "master, timeouts and the mpirun argv, and warnings. Runs nothing.",
        examples=["mpirun_kit plan jobs/maskrcnn-demo.yaml",
                  "mpirun_kit plan jobs/maskrcnn.yaml --json",
                  "mpirun_kit plan jobs/maskrcnn.yaml --stack-output mrk-role.RoleArn=arn:aws:iam::123456789012:"
                  "role/mrk --stack-output mrk-fsx.FileSystemId=fs-0123 ...",
                  "mpirun_kit plan jobs/allreduce-bench.yaml --target sim"],
        codes=exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes=SPEC_CODE_NOTES))
    add_spec_args(p)
    p.set_defaults(func=_plan)
