"""The mpirun argv, built purely from a flavour row and resolved plan facts.

No os.environ and no subprocess here: environment *values* travel in mpirun's
own environment and the argv names them only (``-x NAME``), so the argv shows no
secret and ``--dry-run`` prints exactly what runs.  User MCA parameters and
options override built-in ones; a key is never passed twice, and every override
is reported as a conflict (DeepSpeed #4460, SageMaker examples PR #1882).
"""
from __future__ import annotations

from typing import Sequence

from ..errors import SpecError
from .mpi import MpiFlavour

_MCA_FLAGS = ("--mca", "-mca", "--prtemca", "-prtemca", "--gmca", "-gmca")


def _split_user_options(options: Sequence[str], source: str) -> tuple[list[tuple[str, str]], dict[str, str], list[str]]:
    """Pull MCA pairs and placement flags out of user options; the rest stays verbatim."""
    mca: list[tuple[str, str]] = []
    placement: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    opts = list(options)
    while i < len(opts):
        tok = opts[i]
        if tok in _MCA_FLAGS:
            if i + 2 >= len(opts):
                raise SpecError(f"{source}: {tok!r} needs a key and a value (e.g. {tok} btl_tcp_if_include eth0), "
                                f"got {opts[i + 1:]!r}")
            mca.append((opts[i + 1], opts[i + 2]))
            i += 3
            continue
        if tok.lstrip("-") in ("bind-to", "map-by"):
            if i + 1 >= len(opts):
                raise SpecError(f"{source}: {tok!r} needs a value (e.g. {tok} none)")
            placement[tok.lstrip("-")] = opts[i + 1]
            i += 2
            continue
        rest.append(tok)
        i += 1
    return mca, placement, rest


def merge_mca(builtin: Sequence[tuple[str, str]], user: Sequence[tuple[str, str]]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """Built-in MCA pairs overridden by user pairs; each key once; conflicts described."""
    merged = dict(builtin)
    conflicts: list[str] = []
    user_seen: dict[str, str] = {}
    for key, value in user:
        if key in user_seen and user_seen[key] != value:
            conflicts.append(f"mca {key}: given twice by the user ({user_seen[key]!r}, then {value!r}); using {value!r}")
        elif key in merged and key not in user_seen and merged[key] != value:
            conflicts.append(f"mca {key}: user value {value!r} replaces built-in {merged[key]!r}")
        user_seen[key] = value
        merged[key] = value
    return tuple(merged.items()), tuple(conflicts)


def build_mpirun_argv(
    flavour: MpiFlavour,
    host_slots: Sequence[tuple[str, int]],
    env_names: Sequence[str],
    command: Sequence[str],
    *,
    mca: Sequence[tuple[str, str]] = (),
    options: Sequence[str] = (),
    network_interface: str | None = None,
    ssh_port: int = 22,
    run_as_root: bool = False,
    oversubscribed: bool = False,
    launcher: str | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Build the launcher argv.

    Args:
        flavour: the MPI dialect (plan/mpi.py).
        host_slots: ``(host, slots)`` in rank order.
        env_names: variables to forward to every rank; their values are in mpirun's environment.
        command: what each rank runs (the rank wrapper plus the user's program).
        mca: user MCA pairs (override built-in ones).
        options: user launcher options, appended verbatim except MCA pairs and
            ``--bind-to``/``--map-by``, which replace the built-in ones.
        network_interface: the cluster interface (resourceconfig network_interface_name).
        ssh_port: the workers' sshd port.
        run_as_root: add the flavour's run-as-root flag.
        oversubscribed: more ranks than cores on a host: oversubscribe and yield when idle.
        launcher: launcher path (default: the flavour's launcher name, found on PATH).

    Returns:
        (argv, conflicts): conflicts describe every user value that replaced a built-in one.

    Raises:
        SpecError: a user option is missing its value.
    """
    user_mca_opts, placement_user, rest = _split_user_options(options, "mpi_options")
    builtin = list(flavour.builtin_mca)
    if network_interface:
        builtin += [(k, network_interface) for k in flavour.iface_mca_keys]
    if ssh_port != 22 and flavour.ssh_mca_key:
        builtin.append((flavour.ssh_mca_key, f"-p {ssh_port}"))
    if oversubscribed:
        builtin += list(flavour.yield_mca)
    merged, conflicts = merge_mca(builtin, list(mca) + user_mca_opts)
    conflicts = list(conflicts)
    if merged and flavour.mca_flag is None:
        raise SpecError(f"mca parameters {[k for k, _ in merged]} given, but MPI flavour {flavour.name!r} has no "
                        "MCA parameters; use mpi_options with that MPI's own flags instead")

    argv: list[str] = [launcher or flavour.launcher]
    argv += flavour.root_args if run_as_root else ()
    argv += [flavour.np_flag, str(sum(n for _, n in host_slots))]
    argv += [flavour.hosts_flag, ",".join(f"{h}:{n}" for h, n in host_slots)]
    for flag, value in flavour.placement_args:
        name = flag.lstrip("-")
        if name in placement_user and placement_user[name] != value:
            conflicts.append(f"option {flag}: user value {placement_user[name]!r} replaces built-in {value!r}")
        argv += [flag, placement_user.pop(name, value)]
    for name, value in placement_user.items():
        argv += [f"--{name}" if flavour.name.startswith("openmpi") else f"-{name}", value]
    if oversubscribed:
        argv += flavour.oversubscribe_args
    argv += flavour.tag_args
    if network_interface and flavour.iface_flag:
        argv += [flavour.iface_flag, network_interface]
    if ssh_port != 22 and flavour.ssh_exec_args:
        argv += [*flavour.ssh_exec_args, f"ssh -p {ssh_port}"]
    for key, value in merged:
        runtime = any(key.startswith(p) for p in flavour.runtime_mca_prefixes)
        argv += [flavour.runtime_mca_flag if runtime else flavour.mca_flag, key, value]
    names = list(dict.fromkeys(env_names))
    if names and flavour.env_joined:
        argv += [flavour.env_flag, ",".join(names)]
    else:
        for name in names:
            argv += [flavour.env_flag, name]
    argv += rest
    argv += list(command)
    return tuple(argv), tuple(conflicts)
