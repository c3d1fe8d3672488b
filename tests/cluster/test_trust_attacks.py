"""cluster/trust.py against another user's symbolic link (issue #39, item 5): uid nobody (a real process) puts a
link in a shared directory to a file of root's; a plan input named through it was read on the tree before
(the check stat'ed through the link), so that user chose which of root's files feeds the plan.  Refused now."""
from __future__ import annotations

import pytest
from attack_kit import as_nobody, nobody_uid, shared  # noqa: F401 - shared is a fixture

from mpirun_kit.cluster.trust import read_plan_input
from mpirun_kit.errors import SpecError


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_plan_file_reached_through_another_users_link_is_refused(shared, where):
    mine = shared / "mine"
    mine.mkdir(mode=0o755)
    (mine / "hyperparameters.json").write_text('{"lr": 1}')
    link = shared / ("hp.json" if where == "file" else "dir")
    as_nobody("import os, sys; os.symlink(sys.argv[2], sys.argv[1])", link,
              mine / "hyperparameters.json" if where == "file" else mine)
    path = link if where == "file" else link / "hyperparameters.json"
    with pytest.raises(SpecError) as e:
        read_plan_input(path, "plan input")
    what = "the file" if where == "file" else f"its directory {link}"
    assert str(e.value).startswith(f"{path}: plan input not read: {what} is a symbolic link of uid {nobody_uid()} "
                                   "(nobody); mpirun_kit plans only from files"), str(e.value)


def test_a_link_of_roots_own_is_followed(shared):
    mine = shared / "mine"
    mine.mkdir(mode=0o755)
    (mine / "hyperparameters.json").write_text('{"lr": 1}')
    (shared / "hp.json").symlink_to(mine / "hyperparameters.json")
    assert read_plan_input(shared / "hp.json", "plan input") == '{"lr": 1}'
