"""plan/srun.py: the srun argv of a direct launch inside a Slurm job (mpi_flavour srun), and its refusals."""
import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.plan.srun import build_srun_argv

CMD = ("python3", "-m", "mpirun_kit.rank", "--", "python3", "train.py")


def test_argv_places_ranks_as_the_plan_does():
    argv, conflicts = build_srun_argv([("n1", 2), ("n2", 2)], CMD, {"SLURM_JOB_ID": "42"},
                                      options=("--container-image=img",))
    assert argv == ("srun", "--jobid=42", "--mpi=pmix", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2",
                    "--nodelist=n1,n2", "--distribution=block", "--overlap", "--kill-on-bad-exit=1", "--label",
                    "--container-image=img", *CMD)
    assert conflicts == ()


@pytest.mark.parametrize("slots, environ, mca, message", [
    ([("n1", 2), ("n2", 1)], {"SLURM_JOB_ID": "1"}, (),
     "mpi_flavour srun places the same number of ranks on every node; the hosts have {'n1': 2, 'n2': 1}; "
     "set resources.processes_per_host"),
    ([("n1", 1)], {"SLURM_JOB_ID": "1"}, (("btl", "tcp"),),
     "mca parameters ['btl'] given, but srun takes none; set them as OMPI_MCA_<key> in env instead"),
    ([("n1", 1)], {}, (),
     "mpi_flavour srun runs inside a Slurm job (the batch step of target slurm); SLURM_JOB_ID is unset: submit "
     "with target slurm, or choose another flavour"),
])
def test_refusals_name_the_fix(slots, environ, mca, message):
    with pytest.raises(SpecError) as e:
        build_srun_argv(slots, CMD, environ, mca=mca)
    assert str(e.value) == message
