"""Presets vs user overrides, stale knobs, family lookup: values compared whole, no mocks."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.spec.presets import (STALE_ENV, Conflict, Knob, StaleFinding, TuningResult, find_stale,
                                     gpus_for_instance, instance_family, merge, preset_for, preset_knobs)

HUGE = "FI_EFA_USE_HUGE_PAGE"
IFN = "NCCL_SOCKET_IFNAME"


def test_instance_family():
    assert instance_family("ml.p4d.24xlarge") == ("p4d", "24xlarge")
    assert instance_family("p5en.48xlarge") == ("p5en", "48xlarge")
    assert instance_family("g5.xlarge") == ("g5", "xlarge")
    with pytest.raises(SpecError, match=r"instance type 'p4d' is not an instance type; expected e.g. 'ml.p4d.24xlarge'"):
        instance_family("p4d")


@pytest.mark.parametrize("itype,name", [
    ("ml.p3dn.24xlarge", "p3dn"), ("ml.p4d.24xlarge", "p4d"), ("ml.p4de.24xlarge", "p4d"),
    ("ml.p5.48xlarge", "p5"), ("ml.p5e.48xlarge", "p5"), ("ml.p5en.48xlarge", "p5"),
    ("ml.g5.12xlarge", "g5"), ("ml.g6.xlarge", "g5"), ("ml.c5.xlarge", "cpu"), (None, "cpu"),
])
def test_auto_profile_by_family(itype, name):
    assert preset_for("auto", itype).name == name


def test_auto_on_unknown_family_and_none():
    assert preset_for("auto", "ml.x9z.large") is None
    assert preset_for("none", "ml.p4d.24xlarge") is None


def test_unknown_profile_message():
    with pytest.raises(SpecError, match=r"tuning profile 'p4' is unknown; expected one of \['auto', 'cpu', 'g5', "
                                        r"'none', 'p3', 'p3dn', 'p4d', 'p5'\]"):
        preset_for("p4", None)


def test_gpus_for_instance():
    assert [gpus_for_instance(t) for t in ("ml.p4d.24xlarge", "ml.g5.12xlarge", "ml.g5.xlarge", "ml.c5.xlarge",
                                           "ml.x9z.large")] == [8, 4, 1, 0, None]


def test_p4d_modern_plugin_sets_only_huge_page_and_socket_ifname():
    assert [(k.name, k.value) for k in preset_knobs(preset_for("auto", "ml.p4d.24xlarge"))] == [
        (HUGE, "0"), (IFN, "^docker,lo,veth")]


def test_no_efa_detected_drops_fi_knobs():
    assert [k.name for k in preset_knobs(preset_for("p4d", None), efa=False)] == [IFN]


def test_old_plugins_get_legacy_knobs():
    p4d = preset_for("p4d", None)
    assert [(k.name, k.value) for k in preset_knobs(p4d, ofi_nccl_version="1.5.0")] == [
        (HUGE, "0"), ("FI_PROVIDER", "efa"), ("NCCL_PROTO", "simple"), (IFN, "^docker,lo,veth")]
    assert [(k.name, k.value) for k in preset_knobs(p4d, ofi_nccl_version="1.6.0")] == [
        ("FI_EFA_USE_DEVICE_RDMA", "1"), (HUGE, "0"), (IFN, "^docker,lo,veth")]
    # p3dn has no GPUDirect RDMA: no FI_EFA_USE_DEVICE_RDMA even on 1.6.x
    assert "FI_EFA_USE_DEVICE_RDMA" not in [k.name for k in preset_knobs(preset_for("p3dn", None),
                                                                          ofi_nccl_version="1.6.0")]
    assert [k.name for k in preset_knobs(p4d, ofi_nccl_version="1.7.3")] == [HUGE, IFN]
    with pytest.raises(SpecError, match=r"plugin version 'latest' is not a version; expected dotted numbers"):
        preset_knobs(p4d, ofi_nccl_version="latest")


def test_user_wins_and_conflict_is_reported():
    knobs = preset_knobs(preset_for("p4d", None))
    result = merge(knobs, {IFN: "eth0", "NCCL_DEBUG": "INFO", HUGE: "0"}, preset="p4d", why="family p4d")
    huge, ifn = knobs
    assert result == TuningResult(
        preset="p4d",
        env=((HUGE, "0"), ("NCCL_DEBUG", "INFO"), (IFN, "eth0")),
        applied=(),
        conflicts=(Conflict(IFN, "^docker,lo,veth", "eth0", ifn.reason),),
        stale=(),
        why="family p4d",
    )
    assert result.conflicts[0].render().startswith("NCCL_SOCKET_IFNAME: your value 'eth0' wins over the preset's "
                                                   "'^docker,lo,veth'")


def test_stale_user_knobs_are_reported_but_kept():
    result = merge((Knob("A", "1", "r"),), {"NCCL_PROTO": "Simple", "RDMAV_FORK_SAFE": "1", "NCCL_ALGO": "ring"})
    assert result.env == (("A", "1"), ("NCCL_ALGO", "ring"), ("NCCL_PROTO", "Simple"), ("RDMAV_FORK_SAFE", "1"))
    assert [(s.name, s.severity) for s in result.stale] == [("NCCL_PROTO", "warning"), ("RDMAV_FORK_SAFE", "error")]
    assert result.stale[1].render().startswith("RDMAV_FORK_SAFE=1 is stale (error): never set it")


def test_legacy_knobs_chosen_by_preset_are_not_reported_stale():
    knobs = preset_knobs(preset_for("p4d", None), ofi_nccl_version="1.5.0")
    assert merge(knobs, {}).stale == ()


def test_find_stale_value_specific():
    assert find_stale({"NCCL_PROTO": "LL128", "FI_PROVIDER": "tcp"}) == ()
    assert find_stale({"FI_EFA_FORK_SAFE": "1"}) == (
        StaleFinding("FI_EFA_FORK_SAFE", "1", STALE_ENV["FI_EFA_FORK_SAFE"].reason, "warning"),)
    assert set(STALE_ENV) >= {"RDMAV_FORK_SAFE", "NCCL_PROTO", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"}
