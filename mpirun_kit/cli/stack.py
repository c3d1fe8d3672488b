"""`mpirun_kit stack deploy|outputs|delete|down|bucket|sweep-keys|list`: CloudFormation stacks from cfn/,
and the role stack's bucket.

argparse -> mpirun_kit.stack -> exit code.  This module is where the boto3 client is
built (``--endpoint-url`` / ``AWS_ENDPOINT_URL``, ``--region``), where stdin is asked
for confirmation, and where results are printed; the stack package does the rest.
boto3 and cfn-lint are imported inside the command functions, so ``--help`` stays fast.

Exit codes: 0 done (including "no changes"); 1 change set declined at the prompt;
64 bad input (template, parameters, names, no --yes without a terminal, unknown stack);
69 AWS refused, could not be reached, the stack rolled back, or the deadline passed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from ..errors import SpecError

def _codes(**notes: str):
    from ..errors import ExitCode
    from .main import exit_codes

    return exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, *([1] if "declined" in notes else []),
                      notes={{"ok": 0, "declined": 1, "bad": 64, "aws": 69}[k]: v for k, v in notes.items()})


_VPC_DRY_RUN = ("mpirun_kit stack deploy mrk-vpc --template cfn/vpc.yaml --param AvailabilityZone1=us-west-2a "
                "--param AvailabilityZone2=us-west-2b --dry-run")
_AWS = "no AWS credentials, AWS refused or unreachable"
#: `stack down`'s default order (stack/deploy.py TEARDOWN_ORDER; kept literal so --help imports no boto3).
TEARDOWN_ORDER_TEXT = ("mrk-role", "mrk-efs", "mrk-fsx", "mrk-vpc")


def register(subparsers: Any) -> None:
    from .main import add_command

    p = add_command(subparsers, "stack", help="deploy and inspect the CloudFormation stacks in cfn/",
                    description="Deploy and inspect CloudFormation stacks (cfn/*.yaml). Deploy order: "
                    "vpc -> fsx and/or efs -> sagemaker-role. Job specs read their outputs as "
                    "${stack:NAME.OutputKey}.",
                    examples=[_VPC_DRY_RUN,
                              "mpirun_kit stack list", "mpirun_kit stack ACTION --help"],
                    codes=_codes(bad="bad input, or no AWS region configured", aws=_AWS))
    sub = p.add_subparsers(dest="stack_command", metavar="ACTION", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--region", help="AWS region (default: the AWS config / AWS_DEFAULT_REGION)")
        sp.add_argument("--endpoint-url", help="CloudFormation endpoint (default: AWS_ENDPOINT_URL, else AWS)")

    def deletion(sp: argparse.ArgumentParser, *, timeout_help: str, json_help: str) -> None:
        """The flags of the commands that delete stacks and wait (delete, down)."""
        sp.add_argument("--yes", action="store_true", help="delete without asking (needed without a terminal)")
        sp.add_argument("--timeout", type=float, default=3600.0, metavar="S", help=timeout_help)
        sp.add_argument("--poll", type=float, default=5.0, metavar="S", help="seconds between event polls (default 5)")
        sp.add_argument("--json", action="store_true", help=json_help)
        common(sp)

    d = add_command(sub, "deploy", help="create or update a stack through a change set",
                    description="Check the parameters locally, create a change set, show it, ask (unless "
                    "--yes), execute it and print stack events until the stack settles. --dry-run checks "
                    "locally and prints the request (--json: as JSON) without any AWS call.",
                    examples=[_VPC_DRY_RUN,
                              "mpirun_kit stack deploy mrk-vpc --template cfn/vpc.yaml --yes",
                              "mpirun_kit stack deploy mrk-fsx --template cfn/fsx.yaml --param StorageCapacity=2400 "
                              "--yes --json"],
                    codes=_codes(ok="deployed, or no changes", declined="change set declined at the prompt",
                                 bad="bad template, parameter or stack name, no --yes without a terminal, "
                                 "or no AWS region configured",
                                 aws=_AWS + ", the stack rolled back, or --timeout passed"))
    d.add_argument("name", help="stack name, e.g. mrk-vpc")
    d.add_argument("--template", required=True, help="template file, e.g. cfn/vpc.yaml")
    d.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="template parameter (repeatable); on update, parameters not given keep their current value")
    d.add_argument("--yes", action="store_true",
                   help="execute the change set without asking (needed without a terminal)")
    d.add_argument("--dry-run", action="store_true", help="check locally and print the plan; no AWS call")
    d.add_argument("--take-over", action="store_true",
                   help="update a stack whose owner tag (mpirun-kit-owner) names someone else, and make it yours")
    d.add_argument("--termination-protection", action="store_true",
                   help="turn on the stack's termination protection after the deploy (the README does for the "
                        "VPC and FSx stacks)")
    d.add_argument("--timeout", type=float, default=3600.0, metavar="S",
                   help="seconds to wait for the change set and then for the stack (default 3600)")
    d.add_argument("--poll", type=float, default=5.0, metavar="S", help="seconds between event polls (default 5)")
    d.add_argument("--json", action="store_true",
                   help="print the result (outcome, changes, outputs) as JSON; with --dry-run the request")
    common(d)
    d.set_defaults(func=_deploy)

    o = add_command(sub, "outputs", help="print a stack's outputs",
                    description="Print a stack's outputs as a table, a JSON object or shell exports; job specs "
                    "use them as ${stack:NAME.OutputKey}.",
                    examples=["mpirun_kit stack outputs mrk-vpc", "mpirun_kit stack outputs mrk-fsx --json",
                              "eval \"$(mpirun_kit stack outputs mrk-fsx --env)\""],
                    codes=_codes(bad="bad stack name, the stack does not exist, or no AWS region configured",
                                 aws=_AWS))
    o.add_argument("name", help="stack name, e.g. mrk-vpc")
    fmt = o.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="a JSON object OutputKey -> value")
    fmt.add_argument("--env", action="store_true",
                     help="shell exports: export MRK_<STACK>_<KEY>=value (upper case, non-alphanumerics -> _)")
    common(o)
    o.set_defaults(func=_outputs)

    r = add_command(sub, "delete", help="delete a stack and wait until it is gone",
                    description="Delete a stack and the resources it owns, printing its events until it is gone. "
                    "Asks first unless --yes (required without a terminal).",
                    examples=["mpirun_kit stack delete mrk-efs",
                              "mpirun_kit stack delete mrk-efs --yes --timeout 1800"],
                    codes=_codes(ok="deleted (or it did not exist)", declined="not confirmed at the prompt",
                                 bad="bad stack name, no --yes without a terminal, or no AWS region configured",
                                 aws=_AWS + ", the deletion failed, or --timeout passed"))
    r.add_argument("name", help="stack name, e.g. mrk-efs")
    r.add_argument("--take-over", action="store_true",
                   help="delete a stack whose owner tag (mpirun-kit-owner) names someone else")
    deletion(r, timeout_help="seconds to wait (default 3600)", json_help="print the result as JSON: {stack, status}")
    r.set_defaults(func=_delete)

    dn = add_command(sub, "down", help="delete the walk-through's stacks in dependency order; say what stays",
                     description="Delete the stacks that exist among --stacks, in that order (default: the role, "
                     "then EFS and FSx, then the VPC: each stack's dependants first), turning termination "
                     "protection off first, and print what stays: resources a template keeps "
                     "(DeletionPolicy: Retain, e.g. the EFS file system) with the command that deletes each.",
                     examples=["mpirun_kit stack down --yes --region us-west-2",
                               "mpirun_kit stack down --stacks mrk-role,mrk-vpc --yes"],
                     codes=_codes(ok="every named stack that existed is deleted", declined="not confirmed at the prompt",
                                  bad="bad stack name, no --yes without a terminal, or no AWS region configured",
                                  aws=_AWS + ", a deletion failed, or --timeout passed"))
    dn.add_argument("--stacks", default=",".join(TEARDOWN_ORDER_TEXT), metavar="A,B,...",
                    help=f"stacks to delete, in this order (default {','.join(TEARDOWN_ORDER_TEXT)})")
    dn.add_argument("--take-over", action="store_true",
                    help="delete stacks whose owner tag (mpirun-kit-owner) names someone else")
    dn.add_argument("--force", action="store_true",
                    help="delete even while training jobs run in the stacks' subnets (they will fail)")
    deletion(dn, timeout_help="seconds to wait per stack (default 3600)",
             json_help="print the result as JSON: {deleted, retained}")
    dn.set_defaults(func=_down)

    def bucket_of(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("role_stack", nargs="?", default="mrk-role",
                        help="the role stack whose bucket and prefix (outputs RoleBucket, RolePrefix) are meant "
                        "(default mrk-role)")
        sp.add_argument("--bucket", help="the bucket, instead of the role stack's RoleBucket")
        sp.add_argument("--prefix", help="the key prefix, instead of the role stack's RolePrefix")
        common(sp)

    b = add_command(sub, "bucket", help="check the role stack's bucket: TLS only, no public access, versioning, "
                    "expiring job secrets",
                    description="Check the bucket the role stack's jobs write to (its RoleBucket) for Block Public "
                    "Access, a bucket policy denying requests without TLS (aws:SecureTransport), versioning, and "
                    "a lifecycle rule that expires PREFIX/keys/ (secrets nobody removed); print each missing guard "
                    "with the command that adds it. Changes nothing.",
                    examples=["mpirun_kit stack bucket mrk-role --region us-west-2",
                              "mpirun_kit stack bucket --bucket my-team-bucket --prefix mpirun-kit"],
                    codes=_codes(ok="every guard is in place", declined="a guard is missing (each printed with "
                                 "its remedy)", bad="bad stack name, or no AWS region configured", aws=_AWS))
    bucket_of(b)
    b.set_defaults(func=_bucket)

    sw = add_command(sub, "sweep-keys", help="delete the job secrets of training jobs that have ended",
                     description="List PREFIX/keys/<job>/ in the role stack's bucket and delete the secrets of "
                     "training jobs that have ended (Completed, Failed, Stopped), and of jobs SageMaker does not "
                     "know after an hour (a submit that never created its job). Running jobs' secrets stay. "
                     "For jobs whose submit did not follow them to the end; a lifecycle rule (`stack bucket`) is the backstop.",
                     examples=["mpirun_kit stack sweep-keys mrk-role --region us-west-2 --yes",
                               "mpirun_kit stack sweep-keys --bucket my-team-bucket --prefix mpirun-kit --dry-run"],
                     codes=_codes(ok="swept (or nothing to sweep)", bad="bad stack name, no --yes without a "
                                  "terminal, or no AWS region configured", aws=_AWS))
    bucket_of(sw)
    sw.add_argument("--yes", action="store_true", help="delete without asking (needed without a terminal)")
    sw.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    sw.set_defaults(func=_sweep_keys)

    pf = add_command(sub, "prefix", help="show or set your stack prefix, which 'mrk-' in stack names stands for",
                     description="Show your stack prefix, or set it (NEW). Stack names that begin with 'mrk-', in "
                     "job specs (${stack:mrk-vpc.VpcId}) and on the stack commands (stack deploy mrk-vpc), stand "
                     "for PREFIX-...: with prefix mrk-alice, mrk-vpc is the stack mrk-alice-vpc, so people sharing "
                     "an account deploy and read their own stacks from the same specs. The prefix lives in your "
                     "configuration file (MPIRUN_KIT_CONFIG_DIR/config, else $XDG_CONFIG_HOME/mpirun_kit/config, "
                     "else ~/.config/mpirun_kit/config); the first command that needs it writes mrk-<user> there. "
                     "`stack prefix mrk` keeps the names as written (stacks deployed before prefixes).",
                     examples=["mpirun_kit stack prefix", "mpirun_kit stack prefix mrk-team2",
                               "mpirun_kit stack prefix mrk"],
                     codes=_codes(ok="shown or set", bad="a prefix that cannot begin a stack name"))
    pf.add_argument("new", nargs="?", metavar="NEW", help="the new prefix (a letter, then letters, digits, '-')")
    pf.set_defaults(func=_prefix)

    ls = add_command(sub, "list", help="list stacks (not deleted ones)",
                     description="List the stacks of the account and region that are not deleted: name, status, "
                     "last update.",
                     examples=["mpirun_kit stack list", "mpirun_kit stack list --region us-west-2 --json"],
                     codes=_codes(bad="no AWS region configured", aws=_AWS))
    ls.add_argument("--json", action="store_true", help="a JSON list of {name, status, updated}")
    common(ls)
    ls.set_defaults(func=_list)


def _region(args: argparse.Namespace) -> str:
    """The region every stack command uses: --region, else the AWS configuration; said once (cli/resolve.py)."""
    from ..stack.resolve import aws_default_region, resolve_region
    from .common_flags import say

    if getattr(args, "_region", None):
        return args._region
    region, source = resolve_region(args.region, None, aws_default_region())
    if region is None:
        raise SpecError("no AWS region configured; pass --region REGION, or set AWS_DEFAULT_REGION (or `region` in "
                        "~/.aws/config)")
    say(args, f"region {region} (from {source})")
    args._region = region
    return region


def _client(args: argparse.Namespace, service: str = "cloudformation") -> Any:
    import logging

    import boto3

    # "Found credentials in environment variables" on every run is noise, not progress.
    logging.getLogger("botocore").setLevel(logging.WARNING)
    endpoint = args.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    return boto3.client(service, region_name=_region(args), endpoint_url=endpoint)


def _names(args: argparse.Namespace) -> Any:
    """The user's stack names (stack/prefix.py through cli/resolve.py): read once per command."""
    if getattr(args, "_names", None) is None:
        from .common_flags import say
        from .resolve import stack_names

        args._names = stack_names(lambda line: say(args, line))
    return args._names


def _stack(args: argparse.Namespace, written: str) -> str:
    """The stack ``written`` stands for (``mrk-vpc`` -> ``PREFIX-vpc``), said once when it differs."""
    from .common_flags import say

    names = _names(args)
    real = names.of(written)
    if real != written:
        say(args, f"stack {written} is {real} (stack prefix {names.prefix}, {names.source})")
    return real


def _prefix(args: argparse.Namespace) -> int:
    from ..stack.prefix import check_prefix, write_prefix
    from .resolve import user_config_file

    path = user_config_file()
    if args.new:
        write_prefix(path, check_prefix(args.new, "stack prefix NEW"))
    names = _names(args)
    print(f"stack prefix {names.prefix} ({names.source}): mrk-vpc is {names.of('mrk-vpc')}, "
          f"mrk-role is {names.of('mrk-role')}")
    return 0


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _need_terminal_or_yes(args: argparse.Namespace, what: str) -> None:
    """Refuse before any API call when nobody can answer the prompt."""
    if not args.yes and not sys.stdin.isatty():
        raise SpecError(f"stack {what} {args.name}: stdin is not a terminal, so nobody can confirm the "
                        f"change; rerun with --yes to {what} without asking")


def _ask(question: str) -> bool:
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _deploy(args: argparse.Namespace) -> int:
    from ..core.clock import SYSTEM_CLOCK
    from ..stack import deploy, load_template, make_deploy_request, parse_param_args

    from ..stack.zones import map_zones, needs_mapping
    from .common_flags import say

    template = load_template(args.template)
    params = parse_param_args(args.param)
    args.name = _stack(args, args.name)
    ids = needs_mapping(params) if any(p.name == "AvailabilityZone1" for p in template.parameters) else []
    if args.dry_run and ids:
        raise SpecError(f"stack deploy --dry-run: {', '.join(ids)}: a zone id maps to this account's zone name "
                        "only through AWS (DescribeAvailabilityZones), which a dry run does not call; pass the "
                        "zone name, or deploy without --dry-run (it prints both)")
    # The change set name is chosen here, not in the library, so a request is reproducible.
    cs_name = "mrk-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime(SYSTEM_CLOCK.time()))
    if not ids:  # everything local is checked before any AWS call (zone ids need one to become names)
        # (a required parameter may be missing: on an update it keeps its value, known once the stack is read)
        make_deploy_request(args.name, template, params, cs_name, termination_protection=args.termination_protection,
                            missing_ok=not args.dry_run)
    previous = None
    if not args.dry_run:
        _check_name_first(args)
        _need_terminal_or_yes(args, "deploy")
        previous = _previous_parameters(args)
        if any(p.name == "AvailabilityZone1" for p in template.parameters):
            params, lines = map_zones(params, _client(args, "ec2"), _region(args))
            for line in lines:
                say(args, line)
    request = make_deploy_request(args.name, template, params, cs_name,
                                  termination_protection=args.termination_protection, previous=previous)
    if args.dry_run:
        print(_request_json(request) if args.json else request.render())
        return 0
    _preflight(args, template, params)

    def confirm(changes: tuple) -> bool:
        return True if args.yes else _ask(f"execute change set {cs_name} on stack {args.name}?")

    result = deploy(request, _client(args), confirm=confirm, report=_err, clock=SYSTEM_CLOCK,
                    owner=_owner(args), take_over=args.take_over,
                    timeout_s=args.timeout, poll_s=args.poll)
    if args.json:
        print(json.dumps({"stack": result.stack_name, "outcome": result.outcome,
                          "changes": [c.__dict__ for c in result.changes], "outputs": dict(result.outputs)},
                         indent=2, sort_keys=True))
    else:
        from ..stack.outputs import render_table
        print(f"stack {result.stack_name}: {result.outcome}")
        if result.outcome != "declined":
            print(render_table(dict(result.outputs)))
    return 1 if result.outcome == "declined" else 0


def _previous_parameters(args: argparse.Namespace) -> dict[str, str] | None:
    """The existing stack's parameter values (an update keeps those not given), or None for a new stack."""
    from ..stack.aws import StackNotFoundError
    from ..stack.outputs import describe_stack

    try:
        stack = describe_stack(args.name, _client(args))
    except StackNotFoundError:
        return None
    if stack.get("StackStatus") == "REVIEW_IN_PROGRESS":  # never created: a CREATE change set follows
        return None
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters") or ()}


def _check_name_first(args: argparse.Namespace) -> None:
    from ..stack.request import check_stack_name

    check_stack_name(args.name)


def _preflight(args: argparse.Namespace, template: Any, params: dict) -> None:
    """Before the change set: the quotas the vpc / fsx stack consumes and what the stack will cost each month."""
    import logging

    from ..errors import ClusterError
    from ..stack.cost import stack_monthly
    from ..stack.quotas import stack_preflight
    from .common_flags import say

    defaults = {p.name: p.default for p in template.parameters if p.default is not None}
    shorts, notes = stack_preflight(args.template, params, defaults, lambda name: _client(args, name),
                                    _region(args), args.name)
    if shorts:
        raise ClusterError("\n".join(f"stack deploy {args.name}: {s}" for s in shorts))
    for note in notes:  # an unreadable quota is no refusal: AWS itself says so if the stack hits it
        logging.getLogger(__name__).info("note: %s", note)
    cost = stack_monthly(args.template, params, defaults, _region(args))
    if cost:
        say(args, cost)


def _request_json(request: Any) -> str:
    """``deploy --dry-run --json``: what would be sent, NoEcho values hidden as in the text form."""
    given = dict(request.parameters)
    return json.dumps({
        "stack": request.stack_name, "template": request.template_path, "change_set": request.change_set_name,
        "capabilities": list(request.capabilities), "termination_protection": request.termination_protection,
        "parameters": {k: ("****" if k in request.no_echo else given[k]) for k in request.template_parameters
                       if k in given},
        "defaulted": [k for k in request.template_parameters if k not in given]}, indent=2, sort_keys=True)


def _outputs(args: argparse.Namespace) -> int:
    from ..stack import get_outputs, render_env
    from ..stack.outputs import render_table
    from ..stack.request import check_stack_name

    outputs = get_outputs(_stack(args, check_stack_name(args.name)), _client(args))
    if args.json:
        print(json.dumps(outputs, indent=2, sort_keys=True))
    elif args.env:  # named as written, so scripts read MRK_MRK_VPC_... whoever's stack it is
        print(render_env(args.name, outputs))
    else:
        print(render_table(outputs))
    return 0


def _delete(args: argparse.Namespace) -> int:
    from ..core.clock import SYSTEM_CLOCK
    from ..stack import delete
    from ..stack.request import check_stack_name

    args.name = _stack(args, check_stack_name(args.name))
    _need_terminal_or_yes(args, "delete")
    if not args.take_over:
        from ..stack.aws import StackNotFoundError
        from ..stack.deploy import check_owner
        from ..stack.outputs import describe_stack

        try:
            check_owner(describe_stack(args.name, _client(args)), _owner(args), "delete")
        except StackNotFoundError:
            pass   # delete() says it is not there
    if not args.yes and not _ask(f"delete stack {args.name} and the resources it owns?"):
        _err(f"stack {args.name}: not deleted")
        return 1
    final = delete(args.name, _client(args), report=_err, clock=SYSTEM_CLOCK, timeout_s=args.timeout,
                   poll_s=args.poll)
    print(json.dumps({"stack": args.name, "status": final}) if args.json else f"stack {args.name}: {final}")
    return 0


def _down(args: argparse.Namespace) -> int:
    from ..core.clock import SYSTEM_CLOCK
    from ..stack import teardown
    from ..stack.request import check_stack_name

    names = tuple(_stack(args, check_stack_name(n.strip())) for n in args.stacks.split(",") if n.strip())
    if not names:
        raise SpecError("stack down --stacks: no stack names; e.g. --stacks mrk-role,mrk-efs,mrk-fsx,mrk-vpc")
    if not args.yes and not sys.stdin.isatty():
        raise SpecError("stack down: stdin is not a terminal, so nobody can confirm the deletion; rerun with --yes "
                        "to delete without asking")
    region = _region(args)
    from ..stack.deploy import left_outside_stacks, stack_subnets, training_jobs_in
    from ..stack.outputs import describe_stack

    if not args.force:  # the network and file systems of running training jobs are not ours to pull away
        running = training_jobs_in(_client(args, "sagemaker"), stack_subnets(_client(args), names))
        if running:
            from ..errors import ClusterError

            raise ClusterError(f"stack down: training job(s) {', '.join(running)} are running in these stacks' "
                               "subnets; deleting the VPC and file systems under them fails them. Wait for them "
                               f"(`mpirun_kit status NAME`), stop them (`mpirun_kit stop NAME`), or pass --force")
    if not args.force:  # another stack's file system or a colleague's instance in the VPC is not ours to strand
        from ..stack.deploy import vpc_users

        users = vpc_users(_client(args), _client(args, "ec2"), names)
        if users:
            from ..errors import ClusterError

            raise ClusterError(f"stack down: the VPC of {', '.join(names)} is still in use by what these stacks did not "
                               f"make: {'; '.join(users)}. Delete those first (or the stacks that made them, named "
                               "in --stacks before the VPC's), or pass --force")
    if not args.yes and not _ask(f"delete stacks {', '.join(names)} (in this order) and the resources they own?"):
        _err("stack down: nothing deleted")
        return 1
    arns = {}
    for name in names:
        try:
            arns[name] = str(describe_stack(name, _client(args)).get("StackId", ""))
        except Exception:  # noqa: BLE001 - a stack that is not there has no ARN to read
            pass
    deleted, kept = teardown(names, _client(args), report=_err, clock=SYSTEM_CLOCK, timeout_s=args.timeout,
                             poll_s=args.poll, owner=None if args.take_over else _owner(args))
    kept += left_outside_stacks(kept, deleted, arns)
    if args.json:
        print(json.dumps({"deleted": list(deleted), "retained": [
            {"stack": k.stack_name, "resource": k.logical_id, "type": k.resource_type, "id": k.physical_id,
             "why": k.why, "delete_with": k.delete_command(region)} for k in kept]}, indent=2))
        return 0
    print(f"deleted: {', '.join(deleted) or '(none of them existed)'}")
    for k in kept:
        print(f"kept: {k.resource_type} {k.physical_id} (stack {k.stack_name}, {k.logical_id}: {k.why}). Delete "
              f"it once you no longer need it: {k.delete_command(region)}")
    return 0


def _owner(args: argparse.Namespace) -> str:
    """Who deploys, as the stacks' owner tag: the caller's identity without partition and account
    (``user/alice``, ``assumed-role/Dev/alice@example.com``), from STS GetCallerIdentity."""
    from ..stack.aws import call

    arn = str(call(_client(args, "sts"), "get_caller_identity", "*").get("Arn", ""))
    return arn.split(":", 5)[-1] or arn


def _role_bucket(args: argparse.Namespace) -> tuple[str, str]:
    """(bucket, prefix): --bucket/--prefix, else the role stack's RoleBucket/RolePrefix outputs."""
    if args.bucket and args.prefix:
        return args.bucket, args.prefix
    from ..stack import get_outputs
    from ..stack.request import check_stack_name

    args.role_stack = _stack(args, check_stack_name(args.role_stack))
    outputs = get_outputs(args.role_stack, _client(args))
    missing = [k for k in ("RoleBucket", "RolePrefix") if k not in outputs]
    if missing:
        raise SpecError(f"stack {args.role_stack} has no output {' or '.join(missing)}: it is not a role stack "
                        "(cfn/sagemaker-role.yaml); name the role stack, or pass --bucket and --prefix")
    return args.bucket or outputs["RoleBucket"], args.prefix or outputs["RolePrefix"]


def _bucket(args: argparse.Namespace) -> int:
    from ..stack.bucket import bucket_findings

    bucket, prefix = _role_bucket(args)
    findings = bucket_findings(_client(args, "s3"), bucket, prefix, region=_region(args))
    for line in findings:
        print(line)
    if not findings:
        print(f"bucket {bucket}: Block Public Access on, TLS required, versioning on, {prefix}/keys/ expires")
    return 1 if findings else 0


def _sweep_keys(args: argparse.Namespace) -> int:
    from botocore.exceptions import ClientError

    from ..stack.bucket import sweep_job_keys

    bucket, prefix = _role_bucket(args)
    if not args.yes and not args.dry_run and not sys.stdin.isatty():
        raise SpecError("stack sweep-keys: stdin is not a terminal, so nobody can confirm the deletion; rerun with "
                        "--yes (or --dry-run to list)")
    sm = _client(args, "sagemaker")

    def status_of(job: str) -> str | None:
        try:
            return sm.describe_training_job(TrainingJobName=job)["TrainingJobStatus"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("ValidationException", "ResourceNotFound"):
                return None
            raise
    s3 = _client(args, "s3")
    found = sweep_job_keys(s3, bucket, prefix, status_of, now=time.time(), delete=False)
    if found and not args.dry_run and not args.yes and not _ask(f"delete {len(found)} job secret(s)?"):
        _err("stack sweep-keys: nothing deleted")
        return 1
    if found and not args.dry_run:
        found = sweep_job_keys(s3, bucket, prefix, status_of, now=time.time())
    verb = "would delete" if args.dry_run else "deleted"
    for key, why in found:
        print(f"{verb} s3://{bucket}/{key} ({why})")
    if not found:
        print(f"no job secret to sweep under s3://{bucket}/{prefix.strip('/')}/keys/")
    return 0


def _list(args: argparse.Namespace) -> int:
    from ..stack import list_stacks

    stacks = list_stacks(_client(args))
    if args.json:
        print(json.dumps([{"name": s.name, "status": s.status, "updated": s.updated} for s in stacks], indent=2))
    elif not stacks:
        print("(no stacks)")
    else:
        width = max(len(s.name) for s in stacks)
        for s in stacks:
            print(f"{s.name:<{width}}  {s.status:<24}  {s.updated}")
    return 0
