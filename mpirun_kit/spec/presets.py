"""NCCL/EFA tuning as data: presets per instance family, stale knobs, and the merge.

Place in the data flow: the job layer (spec/compile.py) picks a preset from the
job's instance type and tuning profile, then ``merge`` combines it with the
user's own ``env``; the result becomes ``LaunchSpec.env``.  ``plan`` prints the
``TuningResult`` (what was applied and why, what the user overrode, which stale
knobs are set).  The doctor imports ``STALE_ENV`` and ``find_stale`` to lint a
host's environment; keep one copy of that table, here.

Source for every value: the AWS EFA cheatsheet (aws/aws-ofi-nccl
``doc/efa-env-var.md``).  Its headline rule: with libfabric >= 1.18 and
aws-ofi-nccl >= 1.7.0 at most ``FI_EFA_USE_HUGE_PAGE=0`` is needed; the older
knobs only help old plugins, and some (``RDMAV_FORK_SAFE``) actively hurt.

Nothing here reads the environment or the filesystem: EFA presence and the
plugin version are arguments (topology.detect_efa finds the former).  It sits in spec/
because a job file names its preset and profile (checks.py checks the names) and spec/ is below
plan/ and doctor/, which read the tables too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from ..errors import SpecError

#: Version of aws-ofi-nccl from which the plugin sets the old knobs itself.
MODERN_OFI_NCCL = (1, 7, 0)


@dataclass(frozen=True)
class Knob:
    """One environment variable a preset sets, with the reason it is there."""

    name: str
    value: str
    reason: str


@dataclass(frozen=True)
class StaleKnob:
    """An environment variable that current stacks no longer need, or that hurts.

    ``values`` empty means any value is stale; otherwise only those (compared
    case-insensitively, since NCCL itself ignores case for ``NCCL_PROTO``).
    ``severity`` is ``"error"`` for knobs that break jobs and ``"warning"`` for
    knobs that are merely obsolete or cost bandwidth.
    """

    name: str
    reason: str
    severity: str = "warning"
    values: tuple[str, ...] = ()

    def matches(self, value: str) -> bool:
        if not self.values:
            return True
        return value.strip().lower() in {v.lower() for v in self.values}


#: Stale NCCL/EFA knobs, by variable name.  Imported by the doctor: one table only.
STALE_ENV: Mapping[str, StaleKnob] = {
    k.name: k
    for k in (
        StaleKnob(
            "RDMAV_FORK_SAFE",
            "never set it: the EFA cheatsheet says it 'can break things'; libfabric >= 1.18 "
            "handles fork safety itself (FI_EFA_FORK_SAFE)",
            severity="error",
        ),
        StaleKnob(
            "NCCL_PROTO",
            "NCCL_PROTO=simple was only needed with aws-ofi-nccl <= 1.5.0; newer plugins set it "
            "themselves when needed (aws-ofi-nccl PR #850) and forcing it costs bandwidth on p5 "
            "(PR #280); remove it",
            values=("simple",),
        ),
        StaleKnob(
            "FI_PROVIDER",
            "FI_PROVIDER=efa was only needed with aws-ofi-nccl <= 1.5.0; the plugin selects the "
            "efa provider itself",
            values=("efa",),
        ),
        StaleKnob(
            "FI_EFA_USE_DEVICE_RDMA",
            "only aws-ofi-nccl 1.6.x needed it; >= 1.7.0 enables GPUDirect RDMA itself where the "
            "instance has it (p4d, p5), and p3dn has none",
        ),
        StaleKnob(
            "FI_EFA_FORK_SAFE",
            "not needed on kernel >= 5.15, and the plugin sets it itself where it is",
        ),
        StaleKnob(
            "FI_EFA_SET_CUDA_SYNC_MEMOPS",
            "only needed with efa-installer < 1.29.1 and NCCL >= 2.19; upgrade the installer instead",
        ),
        StaleKnob(
            "NCCL_TUNER_PLUGIN",
            "only needed explicitly for NCCL 2.19-2.20; from NCCL 2.21 the tuner is loaded from the "
            "net plugin",
        ),
    )
}


@dataclass(frozen=True)
class StaleFinding:
    """A stale knob found set in an environment."""

    name: str
    value: str
    reason: str
    severity: str

    def render(self) -> str:
        return f"{self.name}={self.value} is stale ({self.severity}): {self.reason}"


def find_stale(env: Mapping[str, str]) -> tuple[StaleFinding, ...]:
    """Return the stale knobs set in ``env``, sorted by name.

    Args:
        env: variable name -> value (a job's env, or a host's environment).
    """
    found = []
    for name in sorted(env):
        knob = STALE_ENV.get(name)
        if knob is not None and knob.matches(str(env[name])):
            found.append(StaleFinding(name, str(env[name]), knob.reason, knob.severity))
    return tuple(found)


@dataclass(frozen=True)
class Preset:
    """The tuning for one group of instance families."""

    name: str
    families: tuple[str, ...]
    #: True where the family has EFA (p3dn, p4d, p5 always; g5/g6 only on the largest sizes).
    efa: bool
    #: GPUDirect RDMA over EFA ("only p4 and p5 support both EFA and GPUDirect RDMA").
    gpudirect_rdma: bool
    #: knobs for any plugin version.
    knobs: tuple[Knob, ...]
    #: GPUs per instance for the sizes we know, by size suffix ("24xlarge" -> 8).
    gpus_by_size: tuple[tuple[str, int], ...] = ()


_SOCKET_IF = Knob(
    "NCCL_SOCKET_IFNAME",
    "^docker,lo,veth",
    "keep NCCL's bootstrap/socket traffic off docker, loopback and veth interfaces (EFA cheatsheet)",
)
_HUGE_PAGE = Knob(
    "FI_EFA_USE_HUGE_PAGE",
    "0",
    "the one knob still recommended with libfabric >= 1.18: DataLoader worker fork() can fail "
    "with ENOMEM when EFA buffers sit on huge pages (multi-worker COCO loaders)",
)

#: Preset table.  Order matters only for documentation.
PRESETS: tuple[Preset, ...] = (
    Preset("p3dn", ("p3dn",), efa=True, gpudirect_rdma=False, knobs=(_HUGE_PAGE, _SOCKET_IF),
           gpus_by_size=(("24xlarge", 8),)),
    Preset("p4d", ("p4d", "p4de"), efa=True, gpudirect_rdma=True, knobs=(_HUGE_PAGE, _SOCKET_IF),
           gpus_by_size=(("24xlarge", 8),)),
    Preset("p5", ("p5", "p5e", "p5en"), efa=True, gpudirect_rdma=True, knobs=(_HUGE_PAGE, _SOCKET_IF),
           gpus_by_size=(("48xlarge", 8), ("4xlarge", 1))),
    Preset("g5", ("g5", "g6", "g6e"), efa=False, gpudirect_rdma=False, knobs=(_SOCKET_IF,),
           gpus_by_size=(("xlarge", 1), ("2xlarge", 1), ("4xlarge", 1), ("8xlarge", 1), ("16xlarge", 1),
                         ("12xlarge", 4), ("24xlarge", 4), ("48xlarge", 8))),
    Preset("p3", ("p3",), efa=False, gpudirect_rdma=False, knobs=(_SOCKET_IF,),
           gpus_by_size=(("2xlarge", 1), ("8xlarge", 4), ("16xlarge", 8))),
    Preset("cpu", ("c5", "c5n", "c6i", "c6in", "c7i", "m5", "m6i", "m7i", "r5", "r6i", "t3"),
           efa=False, gpudirect_rdma=False, knobs=()),
)

_BY_NAME = {p.name: p for p in PRESETS}
_BY_FAMILY = {f: p for p in PRESETS for f in p.families}
_INSTANCE_RE = re.compile(r"^(?:ml\.)?(?P<family>[a-z][a-z0-9-]*?)\.(?P<size>[0-9]*x?large|metal[-0-9a-z]*)$")

#: Valid ``tuning.profile`` values besides a preset name.
PROFILE_KEYWORDS = ("auto", "none")


def instance_family(instance_type: str) -> tuple[str, str]:
    """Split ``ml.p4d.24xlarge`` (or ``p4d.24xlarge``) into ``("p4d", "24xlarge")``.

    Raises:
        SpecError: the string is not an EC2/SageMaker instance type.
    """
    m = _INSTANCE_RE.match(instance_type.strip().lower())
    if not m:
        raise SpecError(
            f"instance type {instance_type!r} is not an instance type; expected e.g. "
            "'ml.p4d.24xlarge' (SageMaker) or 'p4d.24xlarge' (EC2)"
        )
    return m.group("family"), m.group("size")


def gpus_for_instance(instance_type: str) -> int | None:
    """GPUs per instance for instance types in the table; None when unknown."""
    family, size = instance_family(instance_type)
    preset = _BY_FAMILY.get(family)
    if preset is None:
        return None
    if preset.name == "cpu":
        return 0
    return dict(preset.gpus_by_size).get(size)


def preset_for(profile: str, instance_type: str | None) -> Preset | None:
    """Pick the preset for a tuning profile.

    Args:
        profile: ``auto`` (by the instance family), ``none``, or a preset name
            (``p3dn``, ``p4d``, ``p5``, ``g5``, ``p3``, ``cpu``).
        instance_type: e.g. ``ml.p4d.24xlarge``; None for this machine/unknown.

    Returns:
        The preset, or None for ``none`` and for ``auto`` on an unknown family.

    Raises:
        SpecError: an unknown profile name.
    """
    if profile == "none":
        return None
    if profile == "auto":
        if not instance_type:
            return _BY_NAME["cpu"]
        family, _ = instance_family(instance_type)
        return _BY_FAMILY.get(family)
    preset = _BY_NAME.get(profile)
    if preset is None:
        valid = sorted(PROFILE_KEYWORDS + tuple(_BY_NAME))
        raise SpecError(f"tuning profile {profile!r} is unknown; expected one of {valid}")
    return preset


def parse_version(text: str) -> tuple[int, ...]:
    """``"1.7.3"`` -> ``(1, 7, 3)``; ``"v1.6.0-aws"`` -> ``(1, 6, 0)``.

    Raises:
        SpecError: no leading dotted number.
    """
    m = re.match(r"^v?(\d+(?:\.\d+)*)", str(text).strip())
    if not m:
        raise SpecError(f"plugin version {text!r} is not a version; expected dotted numbers like '1.7.3'")
    return tuple(int(x) for x in m.group(1).split("."))


def preset_knobs(preset: Preset | None, *, efa: bool | None = None,
                 ofi_nccl_version: str | None = None) -> tuple[Knob, ...]:
    """The knobs a preset applies, given what is known about the host.

    Args:
        preset: from ``preset_for``; None applies nothing.
        efa: whether EFA devices are present (None: trust the family table).
        ofi_nccl_version: the aws-ofi-nccl version in the image, when known.  Only
            versions older than 1.7.0 get the legacy knobs (FI_PROVIDER=efa,
            NCCL_PROTO=simple up to 1.5.x; FI_EFA_USE_DEVICE_RDMA=1 on 1.6.x with GDR).
    """
    if preset is None:
        return ()
    has_efa = preset.efa if efa is None else efa
    knobs = [k for k in preset.knobs if has_efa or not k.name.startswith("FI_")]
    if has_efa and ofi_nccl_version is not None:
        version = parse_version(ofi_nccl_version)
        if version < (1, 6):
            knobs.append(Knob("FI_PROVIDER", "efa", f"aws-ofi-nccl {ofi_nccl_version} <= 1.5.x selects no provider itself"))
            knobs.append(Knob("NCCL_PROTO", "simple", f"aws-ofi-nccl {ofi_nccl_version} <= 1.5.x needs the simple protocol"))
        elif version < MODERN_OFI_NCCL and preset.gpudirect_rdma:
            knobs.append(Knob("FI_EFA_USE_DEVICE_RDMA", "1", f"aws-ofi-nccl {ofi_nccl_version} (1.6.x) does not enable GPUDirect RDMA itself"))
    return tuple(sorted(knobs, key=lambda k: k.name))


@dataclass(frozen=True)
class Conflict:
    """A preset value the user's own value replaced."""

    name: str
    preset_value: str
    user_value: str
    reason: str

    def render(self) -> str:
        return (f"{self.name}: your value {self.user_value!r} wins over the preset's "
                f"{self.preset_value!r} ({self.reason})")


@dataclass(frozen=True)
class TuningResult:
    """What ``merge`` produced: the final env and the report ``plan`` prints."""

    preset: str | None
    env: tuple[tuple[str, str], ...]
    applied: tuple[Knob, ...]
    conflicts: tuple[Conflict, ...]
    stale: tuple[StaleFinding, ...]
    #: why the preset was (not) chosen, one line.
    why: str = ""


def merge(knobs: tuple[Knob, ...], user_env: Mapping[str, str], *, preset: str | None = None,
          why: str = "") -> TuningResult:
    """Combine preset knobs with the user's env: the user always wins.

    A knob the user also set is not applied; if the values differ it is reported
    as a ``Conflict`` (DeepSpeed #4460: a built-in setting silently fighting the
    user's).  Stale knobs in the final env are reported, except those the preset
    itself applied (it only does so for an old plugin version the user named).

    Args:
        knobs: from ``preset_knobs``.
        user_env: the job's own env, name -> value.
        preset: preset name, for the report.
        why: one line on why this preset applies.

    Returns:
        TuningResult with ``env`` sorted by name.
    """
    env = {str(k): str(v) for k, v in user_env.items()}
    applied, conflicts = [], []
    for knob in knobs:
        if knob.name in env:
            if env[knob.name] != knob.value:
                conflicts.append(Conflict(knob.name, knob.value, env[knob.name], knob.reason))
            continue
        env[knob.name] = knob.value
        applied.append(knob)
    chosen = {k.name for k in applied}
    stale = tuple(f for f in find_stale(env) if f.name not in chosen)
    return TuningResult(preset, tuple(sorted(env.items())), tuple(applied), tuple(conflicts), stale, why)
