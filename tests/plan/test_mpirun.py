"""Golden launcher argv for every MPI flavour, user overrides, conflicts, and flavour detection."""
import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.plan.mpi import FLAVOURS, get_flavour
from mpirun_kit.plan.mpirun import build_mpirun_argv

HOSTS = [("algo-1", 2), ("algo-2", 2)]
CMD = ["/venv/bin/python", "-m", "mpirun_kit.rank", "--", "python", "train.py"]


def test_openmpi4_golden():
    argv, conflicts = build_mpirun_argv(FLAVOURS["openmpi4"], HOSTS, ["PATH", "NCCL_DEBUG"], CMD,
                                        network_interface="eth0", ssh_port=2222, run_as_root=True)
    assert argv == (
        "mpirun", "--allow-run-as-root", "-np", "4", "-H", "algo-1:2,algo-2:2",
        "--bind-to", "none", "--map-by", "slot", "--tag-output",
        "--mca", "orte_abort_on_non_zero_status", "1", "--mca", "plm_rsh_no_tree_spawn", "1",
        "--mca", "btl_vader_single_copy_mechanism", "none",
        "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
        "--mca", "plm_rsh_args", "-p 2222",
        "-x", "PATH", "-x", "NCCL_DEBUG", *CMD)
    assert conflicts == ()


def test_openmpi4_oversubscribed_not_root():
    argv, _ = build_mpirun_argv(FLAVOURS["openmpi4"], [("h", 4)], [], ["prog"], oversubscribed=True,
                                launcher="/opt/mpi/bin/mpirun")
    assert argv == ("/opt/mpi/bin/mpirun", "-np", "4", "-H", "h:4", "--bind-to", "none", "--map-by", "slot",
                    "--oversubscribe", "--tag-output",
                    "--mca", "orte_abort_on_non_zero_status", "1", "--mca", "plm_rsh_no_tree_spawn", "1",
                    "--mca", "btl_vader_single_copy_mechanism", "none", "--mca", "mpi_yield_when_idle", "1", "prog")


def test_openmpi5_golden():
    argv, _ = build_mpirun_argv(FLAVOURS["openmpi5"], HOSTS, ["PATH"], CMD, network_interface="eth0",
                                ssh_port=2222, run_as_root=True)
    assert argv == (
        "mpirun", "--allow-run-as-root", "-np", "4", "--host", "algo-1:2,algo-2:2",
        "--bind-to", "none", "--map-by", "slot", "--output", "tag",
        "--prtemca", "plm_ssh_no_tree_spawn", "1", "--mca", "smsc", "^cma",
        "--mca", "btl_tcp_if_include", "eth0", "--prtemca", "oob_tcp_if_include", "eth0",
        "--prtemca", "plm_ssh_args", "-p 2222",
        "-x", "PATH", *CMD)


def test_mpich_golden():
    argv, _ = build_mpirun_argv(FLAVOURS["mpich"], HOSTS, ["PATH", "NCCL_DEBUG"], CMD, network_interface="eth0",
                                ssh_port=2222, run_as_root=True)
    assert argv == (
        "mpiexec", "-n", "4", "-hosts", "algo-1:2,algo-2:2", "-bind-to", "none", "-prepend-pattern", "[%r]<hydra>:",
        "-iface", "eth0", "-launcher", "ssh", "-launcher-exec", "ssh -p 2222",
        "-genvlist", "PATH,NCCL_DEBUG", *CMD)


def test_user_mca_and_options_override_builtins_once():
    argv, conflicts = build_mpirun_argv(
        FLAVOURS["openmpi4"], [("h", 1)], [], ["prog"], network_interface="eth0",
        mca=[("btl_tcp_if_include", "ens5"), ("pml", "ob1")],
        options=["--mca", "btl_vader_single_copy_mechanism", "none", "-mca", "pml", "cm",
                 "--bind-to", "core", "--display-map"])
    assert argv == ("mpirun", "-np", "1", "-H", "h:1", "--bind-to", "core", "--map-by", "slot", "--tag-output",
                    "--mca", "orte_abort_on_non_zero_status", "1", "--mca", "plm_rsh_no_tree_spawn", "1",
                    "--mca", "btl_vader_single_copy_mechanism", "none",
                    "--mca", "btl_tcp_if_include", "ens5", "--mca", "oob_tcp_if_include", "eth0",
                    "--mca", "pml", "cm", "--display-map", "prog")
    assert conflicts == (
        "mca btl_tcp_if_include: user value 'ens5' replaces built-in 'eth0'",
        "mca pml: given twice by the user ('ob1', then 'cm'); using 'cm'",
        "option --bind-to: user value 'core' replaces built-in 'none'",
    )


def test_option_errors():
    with pytest.raises(SpecError) as e:
        build_mpirun_argv(FLAVOURS["openmpi4"], [("h", 1)], [], ["p"], options=["--mca", "pml"])
    assert str(e.value) == ("mpi_options: '--mca' needs a key and a value (e.g. --mca btl_tcp_if_include eth0), "
                            "got ['pml']")
    with pytest.raises(SpecError) as e:
        build_mpirun_argv(FLAVOURS["openmpi4"], [("h", 1)], [], ["p"], options=["--map-by"])
    assert str(e.value) == "mpi_options: '--map-by' needs a value (e.g. --map-by none)"
    with pytest.raises(SpecError) as e:
        build_mpirun_argv(FLAVOURS["mpich"], [("h", 1)], [], ["p"], mca=[("pml", "ob1")])
    assert str(e.value) == ("mca parameters ['pml'] given, but MPI flavour 'mpich' has no MCA parameters; "
                            "use mpi_options with that MPI's own flags instead")


def test_get_flavour_unknown():
    with pytest.raises(SpecError) as e:
        get_flavour("lam")
    assert str(e.value) == "mpi_flavour 'lam' is unknown; expected one of ['mpich', 'openmpi4', 'openmpi5', 'srun'] or 'auto'"
