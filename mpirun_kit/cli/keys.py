"""`mpirun_kit keys new|show|install`: the per-job ssh key material (library: mpirun_kit.exec.sshkeys).

  keys new --out FILE              write a fresh 32-byte job secret (mode 600); the only random step
  keys show --secret-file F --job J   public keys and fingerprints derived for job J (never private keys)
  keys install --secret-file F --job J --hosts a,b   write ~/.ssh keys, authorized_keys, known_hosts
                                   and the sshd host key on this host (--dry-run prints them, redacted);
                                   authorized_keys admits the key only from the hosts' addresses
                                   (from=, resolved now; --from ADDR,... to give them)
  keys install --sagemaker         the same with everything from the SageMaker host: hosts and the
                                   cluster interface from resourceconfig.json, the job from
                                   $TRAINING_JOB_NAME, the secret from input channel `mpirun-keys`;
                                   also makes sshd listen on the cluster address.  docker/entry.sh
                                   runs it before the per-host entrypoint.

Every host of a job derives the same keys from the same secret and job name, so
nothing is exchanged at start-up.  Deliver the secret as a file only the job can
read (ops/make-job-keys.sh uploads it as an S3 input channel with SSE-KMS); the
README's "Training image and operator tools" section has the threat model.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


_KEYS_HELP = {
    "new": ("write a fresh job secret",
            "Write a fresh 32-byte job secret to --out (mode 600, written atomically); the only random step. "
            "Every host derives the job's ssh keys from it and the job name.",
            ["mpirun_kit keys new --out job-secret", "mpirun_kit keys new --out job-secret --force"]),
    "show": ("print the job's public keys and fingerprints",
             "Print the public keys and fingerprints derived for job --job from --secret-file (never a private "
             "key), to compare with what a host presents.",
             ["mpirun_kit keys show --secret-file job-secret --job maskrcnn-20261123-101500",
              "mpirun_kit keys show --secret-file job-secret --job maskrcnn-20261123-101500 --json"]),
    "install": ("write the job's ssh files on this host",
                "Write the job's ssh files on this host: ~/.ssh keys, authorized_keys, known_hosts and the sshd "
                "host key. --sagemaker takes hosts, interface, job and secret from the SageMaker host (see "
                "`mpirun_kit keys --help`); --dry-run prints the files, private keys redacted.",
                ["mpirun_kit keys install --secret-file job-secret --job j1 --hosts algo-1,algo-2 --dry-run",
                 "mpirun_kit keys install --sagemaker"]),
}


def register(sub: argparse._SubParsersAction) -> None:
    from ..errors import ExitCode
    from .main import add_command, exit_codes

    codes = exit_codes(ExitCode.BAD_INPUT, notes={64: "bad input: secret file, job name, hosts"})
    p = add_command(sub, "keys", help="per-job ssh key material (new secret, show, install on a host)",
                    # The module docstring minus its first line (which names the library module).
                    description="Per-job ssh key material.\n\n" + __doc__.split("\n", 2)[2], codes=codes,
                    examples=["mpirun_kit keys new --out job-secret", "mpirun_kit keys ACTION --help"])
    ksub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    def action(name: str) -> argparse.ArgumentParser:
        helptext, description, examples = _KEYS_HELP[name]
        return add_command(ksub, name, help=helptext, description=description, examples=examples,
                           codes=codes if name != "new" else exit_codes(ExitCode.BAD_INPUT, notes={
                               64: "--out exists (without --force), is a directory, or cannot be written"}))

    new = action("new")
    new.add_argument("--out", required=True, help="file to create (mode 600)")
    new.add_argument("--force", action="store_true", help="replace an existing file")
    new.set_defaults(func=_new)

    for name, func in (("show", _show), ("install", _install)):
        k = action(name)
        k.add_argument("--secret-file", required=(name == "show"),
                       help="the job secret (from `keys new`)" + ("; with --sagemaker default "
                            "/opt/ml/input/data/mpirun-keys/job-secret" if name == "install" else ""))
        k.add_argument("--job", default=None,
                       help="job name the keys are bound to (default: $TRAINING_JOB_NAME, set by SageMaker)")
        k.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "install":
            k.add_argument("--hosts", help="every host of the job, comma-separated (known_hosts)")
            k.add_argument("--sagemaker", action="store_true",
                           help="take hosts, interface, job and secret from the SageMaker host (see above); "
                                "a single-host job without a secret needs no keys and installs none")
            k.add_argument("--opt-ml", default="/opt/ml", help="SageMaker's /opt/ml (default /opt/ml)")
            k.add_argument("--listen-config", default=None,
                           help="where the sshd listen drop-in goes (default "
                                "/etc/ssh/sshd_config.d/50-mpirun-kit-listen.conf)")
            k.add_argument("--ssh-dir", default=None, help="the login user's ~/.ssh (default $HOME/.ssh)")
            k.add_argument("--host-key", default=None,
                           help="sshd host key path (default /etc/ssh/mpirun_kit/ssh_host_ed25519_key, "
                                "as docker/sshd_config expects)")
            k.add_argument("--dry-run", action="store_true", help="print the files (private keys redacted)")
            k.add_argument("--from", dest="from_addresses", default=None, metavar="ADDR,...",
                           help="the addresses authorized_keys admits the job's key from (from=...); default: "
                                "every host name resolved now, plus loopback")
            k.add_argument("--resolve-timeout-s", type=float, default=120.0,
                           help="how long to wait for every host name to resolve; authorized_keys admits the key "
                                "only from the job's host addresses (from=...), resolved now (default 120)")
        k.set_defaults(func=func)


def _new(args) -> int:
    import secrets

    from ..errors import SpecError
    from ..core.files import write_atomic
    from ..exec.sshkeys import SECRET_BYTES, format_secret

    out = Path(args.out)
    if not args.out or out.is_dir():
        raise SpecError(f"keys new: --out {args.out!r} is a directory or empty; name the file to create, "
                        "e.g. --out job-secret")
    if out.exists() and not args.force:
        raise SpecError(f"keys new: {out} exists; a job secret is never overwritten silently "
                        "(pass --force, or choose another --out)")
    blocking = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise SpecError(f"keys new: cannot write --out {out}: {blocking} is a file, not a directory; choose "
                        "another --out")
    try:
        # Created 0600: the secret is never readable by others, even briefly.
        write_atomic(out, format_secret(secrets.token_bytes(SECRET_BYTES)), 0o600)
    except OSError as exc:
        # Name the ancestor that failed (mkdir), never the temporary file beside the target.
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) in map(str, out.parents) else ""
        raise SpecError(f"keys new: cannot write --out {out}: {exc.strerror}{where}; choose a file in a "
                        "directory you can write") from exc
    print(f"wrote job secret {out} (mode 600)", file=sys.stderr)
    return 0


def _material(args, secret_file: str):
    from ..errors import SpecError
    from ..exec.sshkeys import derive_material, parse_secret

    job = args.job or os.environ.get("TRAINING_JOB_NAME")
    if not job:
        raise SpecError("keys: no job name; pass --job NAME (on SageMaker TRAINING_JOB_NAME is used)")
    try:
        text = Path(secret_file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not text: a job secret is one line of hex"
        raise SpecError(f"keys: cannot read secret file {secret_file} ({why}); "
                        "create one with `mpirun_kit keys new --out FILE`") from exc
    return derive_material(parse_secret(text, secret_file), job)


def _interface_address(name: str) -> str:
    """The IPv4 address of interface ``name`` on this host."""
    import socket

    import psutil

    from ..errors import SpecError

    addrs = psutil.net_if_addrs()
    for a in addrs.get(name, ()):
        if a.family == socket.AF_INET:
            return a.address
    raise SpecError(f"keys install: interface {name!r} (resourceconfig network_interface_name) has no IPv4 "
                    f"address on this host; interfaces here: {sorted(addrs)}")


def _sagemaker_context(args) -> tuple[str, tuple[str, ...], str | None] | None:
    """(secret file, hosts, cluster address) on a SageMaker host; None where no keys are needed."""
    from ..cluster.sagemaker import RESOURCE_CONFIG, parse_resource_config, read_json
    from ..errors import SpecError
    from ..exec.sshkeys import SAGEMAKER_SECRET_PATH

    rc = Path(args.opt_ml) / RESOURCE_CONFIG
    if not rc.exists():
        print(f"keys install: no {rc}: not a SageMaker host, no ssh keys installed", file=sys.stderr)
        return None
    cluster = parse_resource_config(read_json(rc), str(rc))
    secret = args.secret_file or SAGEMAKER_SECRET_PATH
    if not Path(secret).exists():
        if len(cluster.hosts) == 1:
            print("keys install: single-host job and no job secret: no ssh keys needed", file=sys.stderr)
            return None
        raise SpecError(f"keys install: {len(cluster.hosts)}-host job but no job secret at {secret}; give the job "
                        "the input channel 'mpirun-keys' (s3://BUCKET/PREFIX/keys/${job_name}/: `mpirun_kit submit` "
                        "makes the secret there), or create one with ops/make-job-keys.sh --job NAME --out "
                        "s3://BUCKET/PREFIX/keys/NAME/ and pass that prefix")
    address = _interface_address(cluster.network_interface) if cluster.network_interface else None
    return secret, cluster.host_names, address


def _show(args) -> int:
    m = _material(args, args.secret_file)
    info = {"job": m.job, "user_public": m.user_public, "user_fingerprint": m.user_fingerprint,
            "host_public": m.host_public, "host_fingerprint": m.host_fingerprint}
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print(f"job:        {m.job}\nuser key:   {m.user_fingerprint}  {m.user_public}\n"
              f"host key:   {m.host_fingerprint}  {m.host_public}")
    return 0


def _install(args) -> int:
    from ..errors import SpecError
    from ..exec.sshkeys import HOST_KEY_PATH, LISTEN_CONFIG_PATH, plan_install, resolve_addresses, write_files

    address = None
    if args.sagemaker:
        ctx = _sagemaker_context(args)
        if ctx is None:
            return 0
        secret, sm_hosts, address = ctx
        hosts = list(sm_hosts) if args.hosts is None else [h.strip() for h in args.hosts.split(",") if h.strip()]
    else:
        if not args.secret_file or args.hosts is None:
            raise SpecError("keys install: pass --secret-file FILE and --hosts H1,H2 (or --sagemaker on a "
                            "SageMaker host)")
        secret = args.secret_file
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    m = _material(args, secret)
    ssh_dir = args.ssh_dir or os.path.join(os.environ.get("HOME", "/root"), ".ssh")
    files = plan_install(m, hosts, ssh_dir, args.host_key or HOST_KEY_PATH, listen_address=address,
                         from_addresses=([a.strip() for a in args.from_addresses.split(",") if a.strip()]
                                         if args.from_addresses is not None else
                                         resolve_addresses(hosts, timeout_s=args.resolve_timeout_s)),
                         listen_config_path=args.listen_config or LISTEN_CONFIG_PATH)
    if args.dry_run:
        if args.json:
            print(json.dumps([{"path": f.path, "mode": f"{f.mode:04o}", "secret": f.secret,
                               "content": None if f.secret else f.content} for f in files], indent=2))
        else:
            print("\n".join(f.describe() for f in files))
        return 0
    write_files(files)
    if args.json:
        print(json.dumps({"job": m.job, "user_fingerprint": m.user_fingerprint, "hosts": hosts,
                          "files": [f.path for f in files]}, indent=2))
    print(f"installed ssh keys for job {m.job} ({m.user_fingerprint}) for {len(hosts)} host(s)", file=sys.stderr)
    return 0
