"""cluster/local.py: this machine's MPI flavour, read from ``mpirun --version`` by discovery (the plan gets the name)."""
from __future__ import annotations

import pytest

from mpirun_kit.cluster.local import detect_flavour, detect_with, flavour_of_version
from mpirun_kit.errors import LaunchError
from mpirun_kit.plan.mpi import FLAVOURS


def test_flavour_of_version():
    assert flavour_of_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/") == "openmpi4"
    assert flavour_of_version("mpirun (Open MPI) 5.0.6\n") == "openmpi5"
    assert flavour_of_version("HYDRA build details:\n    Version:   4.1.2\n") == "mpich"
    assert flavour_of_version("Intel(R) MPI Library for Linux* OS, Version 2021.10") == "mpich"
    with pytest.raises(LaunchError) as e:
        flavour_of_version("srun: unknown\n")
    assert str(e.value) == ("`mpirun --version` printed ['srun: unknown'], which is no known MPI; expected Open MPI "
                            "4/5 or MPICH/Hydra; set mpi_flavour explicitly (openmpi4, openmpi5, mpich)")


def test_detect_with_runner():
    seen = []
    assert detect_with(lambda argv: seen.append(argv) or "mpirun (Open MPI) 4.1.4") == "openmpi4"
    assert seen == [["mpirun", "--version"]]

    def missing(argv):
        raise FileNotFoundError(argv[0])

    with pytest.raises(LaunchError) as e:
        detect_with(missing)
    assert str(e.value) == ("'mpirun' not found on PATH; install Open MPI (apt-get install openmpi-bin) or put the "
                            "venv's bin directory on PATH")


def test_real_mpirun_detected():
    import shutil
    import subprocess

    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun on PATH")
    out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    assert flavour_of_version(out) in FLAVOURS


def test_every_detected_name_is_a_flavour_the_plan_knows():
    # Discovery names the flavour without importing plan/; the names must still be FLAVOURS' keys.
    texts = ["mpirun (Open MPI) 4.1.4", "mpirun (Open MPI) 5.0.6", "HYDRA build details:"]
    assert {flavour_of_version(t) for t in texts} == set(FLAVOURS)


def test_detect_flavour_falls_back_or_raises():
    def unknown(argv):
        return "srun: unknown\n"

    assert detect_flavour(unknown) == "openmpi4"
    with pytest.raises(LaunchError) as e:
        detect_flavour(unknown, fallback=None)
    assert str(e.value).startswith("`mpirun --version` printed ['srun: unknown'], which is no known MPI")
