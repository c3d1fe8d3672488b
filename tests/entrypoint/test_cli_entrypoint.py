"""`mpirun_kit entrypoint` as a real process: dry-run output, bad-input messages and their exit codes."""
import json

import pytest

from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec, Timeouts

from entrypoint_helpers import cli, write_config

pytestmark = pytest.mark.timeout(120)

RC = {"current_host": "algo-2", "hosts": ["algo-1", "algo-2", "algo-3"], "network_interface_name": "lo"}
SPEC = LaunchSpec(program=("python", "train.py"), processes_per_host=2, env=(("WANDB_API_KEY", "k3y"),),
                  mpi_flavour="openmpi4")


def test_dry_run_text(tmp_path):
    write_config(tmp_path, RC, {LAUNCH_SPEC_HYPERPARAMETER: SPEC.to_json()})
    res = cli(["entrypoint", "--opt-ml", str(tmp_path), "--dry-run"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("this host  algo-2 (role worker)\nlaunch plan\n")
    assert "  master     algo-1 (result channel port chosen per job when it starts, ssh port 22)\n" in res.stdout
    assert "    algo-3               slots=2  ranks 4-5\n" in res.stdout
    assert "WANDB_API_KEY=***" in res.stdout and "k3y" not in res.stdout
    assert "--mca btl_tcp_if_include lo" in res.stdout
    assert res.stdout.rstrip().endswith("-m mpirun_kit.rank -- python train.py")


def test_dry_run_json_and_flag_overrides(tmp_path):
    write_config(tmp_path, RC, {LAUNCH_SPEC_HYPERPARAMETER: SPEC.to_json()})
    res = cli(["entrypoint", "--opt-ml", str(tmp_path), "--dry-run", "--json", "-n", "1", "--result-port", "4000",
               "--", "python", "other.py"])
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert (d["role"], d["current_host"], d["master"], d["result_port"]) == ("worker", "algo-2", "algo-1", 4000)
    assert d["program"] == ["python", "other.py"]
    assert [h["slots"] for h in d["hosts"]] == [1, 1, 1]
    assert d["env"]["WANDB_API_KEY"] == "***"


@pytest.mark.parametrize("rc, expected", [
    ('{"current_host": "algo-1", "hosts": [', "malformed JSON at line 1 column"),
    (json.dumps({"current_host": "algo-7", "hosts": ["algo-1", "algo-2"]}),
     "field 'current_host' is 'algo-7', which is not in field 'hosts' ['algo-1', 'algo-2']"),
    (json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "nosuch9"}),
     "field 'network_interface_name' names network interface 'nosuch9', which this host does not have"),
])
def test_bad_resourceconfig_exit_64(tmp_path, rc, expected):
    cfg = write_config(tmp_path, raw_rc=rc, hyperparameters={LAUNCH_SPEC_HYPERPARAMETER: SPEC.to_json()})
    res = cli(["entrypoint", "--opt-ml", str(tmp_path)])
    assert res.returncode == 64
    assert f"mpirun_kit: error: {cfg / 'resourceconfig.json'}: " in res.stderr
    assert expected in res.stderr


def test_no_program(tmp_path):
    write_config(tmp_path, RC, {"lr": "0.1"})
    res = cli(["entrypoint", "--opt-ml", str(tmp_path), "--dry-run"])
    assert res.returncode == 64
    assert (f"mpirun_kit: error: no program to run: {tmp_path}/input/config/hyperparameters.json has no "
            "'mpirun_kit_launch' key and no --spec or '-- PROGRAM ARGS' was given; pass one of them") in res.stderr


def test_bad_spec_file(tmp_path):
    (tmp_path / "spec.json").write_text("{nope")
    res = cli(["entrypoint", "--opt-ml", str(tmp_path), "--spec", str(tmp_path / "spec.json"), "--dry-run"])
    assert res.returncode == 64
    assert f"mpirun_kit: error: {tmp_path / 'spec.json'}: not valid JSON" in res.stderr
    res = cli(["entrypoint", "--opt-ml", str(tmp_path), "--spec", str(tmp_path / "missing.json"), "--dry-run"])
    assert res.returncode == 64
    assert f"{tmp_path / 'missing.json'}: cannot read launch spec (No such file or directory)" in res.stderr


def test_launch_dry_run_hosts(tmp_path):
    res = cli(["launch", "--hosts", "localhost:2", "--dry-run", "--", "python", "x.py"])
    assert res.returncode == 0, res.stderr
    assert "this host  localhost (role master)" in res.stdout and "-H localhost:2" in res.stdout


def test_help_documents_exit_codes():
    res = cli(["entrypoint", "--help"])
    assert res.returncode == 0
    flat = " ".join(res.stdout.split())
    assert "75 a worker lost its master" in flat and "--no-sshd" in flat and "--opt-ml DIR" in flat
    assert "74 a worker host went silent mid-job" in flat and "--secret-file FILE" in flat


def test_launch_runs_from_this_host_whatever_the_election(tmp_path):
    hf = tmp_path / "hostfile"
    hf.write_text("zz-this slots=1\naa-other slots=1\n")
    res = cli(["entrypoint", "--hostfile", str(hf), "--current-host", "zz-this", "--role", "master",
               "--opt-ml", str(tmp_path), "--dry-run", "--json", "--", "python", "x.py"])
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert (d["role"], d["master"]) == ("master", "zz-this")
    assert d["env"]["MPIRUN_KIT_RESULT_ADDR"] == "zz-this:0"   # 0: the port the master binds when it starts


@pytest.mark.parametrize("content, expected", [
    (None, "--secret-file {p}: cannot read the job secret (No such file or directory); pass the file written by "
           "`mpirun_kit keys new`"),
    (b"\xff\xfe\x00binary", "{p}: cannot read the job secret (not UTF-8 text); pass the file written by "
                            "`mpirun_kit keys new`"),
    (b"abcd\n", "{p}: expected 64 hex characters (a 32-byte job secret), got 4 characters"),
])
def test_bad_secret_file_exit_64(tmp_path, content, expected):
    secret = tmp_path / "job-secret"
    if content is not None:
        secret.write_bytes(content)
    write_config(tmp_path, RC, {LAUNCH_SPEC_HYPERPARAMETER: SPEC.to_json()})
    res = cli(["entrypoint", "--opt-ml", str(tmp_path), "--no-sshd", "--secret-file", str(secret)])
    assert res.returncode == 64, res.stderr
    assert "mpirun_kit: error: " + expected.format(p=secret) in res.stderr


def test_no_job_secret_warns_that_workers_are_not_authenticated(tmp_path):
    spec = LaunchSpec(program=("true",), mpi_flavour="openmpi4", timeouts=Timeouts(master_connect_s=0.2))
    write_config(tmp_path, RC, {LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
    res = cli(["entrypoint", "--opt-ml", str(tmp_path), "--no-sshd"])  # a worker whose master never comes
    assert res.returncode == 75, res.stderr
    assert (f"mpirun_kit: warning: no job secret at {tmp_path}/input/data/mpirun-keys/job-secret: the result "
            "channel authenticates ranks (a key made per run) but not workers; deliver the secret (input channel "
            "mpirun-keys) or pass --secret-file") in res.stderr


def test_flavour_detection_failure_is_named(tmp_path):
    """`mpirun --version` runs in the entrypoint's probe thread (beside the sshd wait); with no mpirun on PATH
    its error still ends the entrypoint with the launcher's message and exit code, not a traceback or a wait."""
    import dataclasses
    import os
    import subprocess

    from entrypoint_helpers import CLI

    write_config(tmp_path, RC, {LAUNCH_SPEC_HYPERPARAMETER: dataclasses.replace(SPEC, mpi_flavour="auto").to_json()})
    env = {k: v for k, v in os.environ.items() if k != "SM_HOSTS"}
    env["PATH"] = str(tmp_path / "no-such-bin")
    res = subprocess.run(CLI + ["entrypoint", "--opt-ml", str(tmp_path), "--dry-run"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 70, res.stderr
    assert res.stderr.endswith("mpirun_kit: error: 'mpirun' not found on PATH; install Open MPI (apt-get install "
                               "openmpi-bin) or put the venv's bin directory on PATH\n")
    assert "Traceback" not in res.stderr


def test_entrypoint_builds_only_its_own_parser_with_the_same_help():
    """Issue 41: `mpirun_kit entrypoint` starts on every host at once; the fast path imports no other command's
    module (a third of a host's start-up CPU), and its help and flags are those of the whole command line's."""
    import subprocess
    import sys

    from mpirun_kit.cli.main import build_parser, subcommand_parsers

    probe = ("import sys; from mpirun_kit.cli import main\n"
             "try:\n    main.main(['entrypoint', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith('mpirun_kit.cli.')), file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    loaded = res.stderr.strip().splitlines()[-1]
    assert "mpirun_kit.cli.entrypoint" in loaded and "mpirun_kit.cli.submit" not in loaded \
        and "mpirun_kit.cli.jobs" not in loaded, loaded
    fast = next(p for p in subcommand_parsers(build_parser(only="entrypoint")) if p.prog.endswith(" entrypoint"))
    whole = next(p for p in subcommand_parsers(build_parser()) if p.prog.endswith(" entrypoint"))
    assert fast.format_help() == whole.format_help() and "usage: mpirun_kit entrypoint" in res.stdout
