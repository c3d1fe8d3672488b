"""Rank placement in --map-by slot order, and its compact encoding for the rank wrapper."""
import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.plan.ranks import RankSlot, assign_ranks, encode_host_slots
from mpirun_kit.plan.contract import host_of_rank


def test_assign_fills_hosts_in_order():
    assert assign_ranks([("a", 2), ("b", 1), ("c", 2)]) == (
        RankSlot(0, "a", 0, 2), RankSlot(1, "a", 1, 2), RankSlot(2, "b", 0, 1),
        RankSlot(3, "c", 0, 2), RankSlot(4, "c", 1, 2))


def test_bad_slots():
    with pytest.raises(SpecError) as e:
        assign_ranks([("a", 0)])
    assert str(e.value) == ("host 'a' has 0 slots; expected a positive integer "
                            "(set processes_per_host or the hostfile's slots=N)")


def test_encoding_round_trip():
    pairs = [("algo-1", 2), ("algo-2", 3)]
    enc = encode_host_slots(pairs)
    assert enc == "algo-1:2,algo-2:3"
    assert [host_of_rank(enc, r.rank) for r in assign_ranks(pairs)] == [
        (r.host, r.local_rank) for r in assign_ranks(pairs)]
    assert host_of_rank(enc, 5) is None
    assert host_of_rank("garbage", 0) is None
