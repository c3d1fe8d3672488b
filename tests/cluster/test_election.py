"""Master election is a pure function of the names: numeric for algo-N, sorted() otherwise."""
import pytest

from mpirun_kit.cluster.election import elect_master
from mpirun_kit.errors import SpecError


def test_algo_names_numeric_not_lexical():
    assert elect_master([f"algo-{i}" for i in range(12, 1, -1)]) == "algo-2"
    assert elect_master(["algo-10", "algo-9", "algo-1"]) == "algo-1"
    # lexical order would put algo-10 before algo-9
    assert elect_master(["algo-10", "algo-9"]) == "algo-9"


def test_other_names_sorted_first():
    assert elect_master(["node-b", "node-a", "node-c"]) == "node-a"
    assert elect_master(["algo-2", "login"]) == "algo-2"  # mixed naming: plain sorted()
    assert elect_master(["zeta", "algo-2"]) == "algo-2"


def test_same_answer_in_any_order():
    names = ["algo-3", "algo-1", "algo-2"]
    assert {elect_master(names), elect_master(reversed(names)), elect_master(sorted(names))} == {"algo-1"}


def test_empty():
    with pytest.raises(SpecError) as e:
        elect_master([])
    assert str(e.value) == "cannot elect a master from an empty host list; the cluster source listed no hosts"
