"""Spec loader: every user-facing error message asserted, contradictions, whole-value builds."""
from __future__ import annotations

import textwrap

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.spec import schema as S
from mpirun_kit.spec.findings import JobSpecError
from mpirun_kit.spec.load import load_job, load_job_text

HEAD = "apiVersion: mpirun_kit/v1\nkind: Job\nname: t\n"
PROG = "program:\n  module: pkg.train\n"


def errors(text: str, **kw) -> list[str]:
    with pytest.raises(JobSpecError) as info:
        load_job_text(textwrap.dedent(text), "job.yaml", **kw)
    return [f.render("job.yaml") for f in info.value.findings]


def test_minimal_spec_builds_whole_value():
    job = load_job_text(HEAD + PROG, "job.yaml")
    assert job == S.JobSpec(name="t", program=S.Program(module="pkg.train"), source="job.yaml")


def test_unknown_key_suggests_closest_with_line():
    assert errors(HEAD + PROG + "resources:\n  hosts: 1\n  instnce_type: ml.p4d.24xlarge\n") == [
        "job.yaml:8: resources.instnce_type: unknown key; did you mean 'instance_type'? "
        "valid keys here: hosts, instance_type, processes_per_host"]


def test_unknown_top_level_key():
    assert errors(HEAD + PROG + "hyperparameter:\n  lr: 0.1\n") == [
        "job.yaml:6: hyperparameter: unknown key; did you mean 'hyperparameters'? valid keys here: apiVersion, "
        "checkpoint, data, description, env, env_forward, hyperparameters, image, kind, mpi, name, output, "
        "pinning, program, resources, retries, spot, target, timeouts, tuning, vpc"]


def test_type_enum_and_required_messages():
    assert errors("""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: bad name
        target:
          type: sagemker
        resources:
          hosts: "2"
          processes_per_host: 0
        data:
          train:
            fsx: {file_system_id: fs-1}
            mode: rx
        env:
          bad-name: 1
        tuning: {efa: maybe}
        """) == [
        "job.yaml:1: missing required key 'program'",
        "job.yaml:3: name: expected a job name of letters, digits and '-', at most 63 characters (SageMaker's rule); got string 'bad name'",
        "job.yaml:5: target.type: expected one of 'local', 'sim', 'ssh', 'sagemaker', 'slurm'; got string 'sagemker'; "
        "did you mean 'sagemaker'?",
        "job.yaml:7: resources.hosts: expected an integer >= 1; got string '2'",
        "job.yaml:8: resources.processes_per_host: expected an integer >= 1 or 'auto'; got number 0",
        "job.yaml:11: data.train.fsx: missing required key 'mount_name'",
        "job.yaml:12: data.train.mode: expected one of 'ro', 'rw'; got string 'rx'",
        "job.yaml:14: env.bad-name: 'bad-name' is not a valid name here; expected a string matching "
        "^[A-Za-z_][A-Za-z0-9_]*$",
        "job.yaml:15: tuning.efa: expected one of 'auto', true, false; got string 'maybe'",
    ]


def test_yaml_syntax_error_has_line():
    assert errors(HEAD + PROG + "vpc:\n  subnets: [${stack:a.B}]\n") == [
        "job.yaml:7: not valid YAML: while parsing a flow sequence expected ',' or ']', but got '{'; "
        "fix the syntax there"]


def test_duplicate_key():
    assert errors(HEAD + PROG + "name: u\n") == ["job.yaml:6: name: duplicate key (first at line 3); keep one"]


def test_not_a_mapping_and_empty_file():
    assert errors("- a\n- b\n") == [
        "job.yaml:1: expected a mapping with apiVersion, kind, name, program; got a list"]
    assert errors("") == ["job.yaml: expected a mapping with apiVersion, kind, name, program; got null (empty value)"]


def test_non_string_key():
    assert errors(HEAD + PROG + "env:\n  1: x\n") == [
        "job.yaml:6: env: key 1 is number 1; keys must be strings (quote it)"]


def test_wrong_api_version():
    assert errors("apiVersion: mpirun_kit/v2\nkind: Job\nname: t\n" + PROG) == [
        "job.yaml:1: apiVersion: this mpirun_kit reads 'mpirun_kit/v1'; got string 'mpirun_kit/v2'"]


def test_date_value_hint():
    assert errors(HEAD + PROG + "description: 2024-01-01\n") == [
        "job.yaml:6: description: expected a string; got a date 2024-01-01 (quote it to make it a string)"]


def test_unreadable_file(tmp_path):
    """One wording for every file that cannot be read, without errno (issue 22 defect 6)."""
    cases = {tmp_path / "nope.yaml": "no such file or directory",
             tmp_path: "a directory (`validate` takes directories; `plan` and `submit` take one spec file)"}
    (tmp_path / "bin.yaml").write_bytes(b"name: \xff\xfe\n")
    cases[tmp_path / "bin.yaml"] = "not UTF-8 text (byte 6)"
    for path, why in cases.items():
        with pytest.raises(SpecError) as info:
            load_job(path)
        assert str(info.value) == f"{path}: cannot read the job spec: {why}; expected a UTF-8 YAML job spec file"


def test_range_message_reads_as_words():
    """Issue 22 defect 6: `expected an integer >= 0 <= 30`."""
    assert errors(HEAD + PROG + "retries: 99\n") == [
        "job.yaml:6: retries: expected an integer from 0 to 30; got number 99"]


LOCAL_DATA = HEAD + PROG + "data:\n  train: {local: ./nope}\n"


@pytest.mark.parametrize("target", ["local", "sim"])
def test_missing_local_data_channel_is_an_error_where_the_job_runs_here(tmp_path, target):
    """Issue 22 defect 6: `local: ./nope` passed validate and submit silently."""
    spec = tmp_path / "job.yaml"
    spec.write_text(LOCAL_DATA + f"target: {{type: {target}}}\n")
    with pytest.raises(JobSpecError) as info:
        load_job(spec)
    assert [f.render("job.yaml") for f in info.value.findings] == [
        f"job.yaml:7: data.train.local: './nope' does not exist (resolved against the spec's directory: "
        f"{tmp_path / 'nope'}); create it or point the channel at the data's directory"]
    (tmp_path / "nope").write_text("a file")
    with pytest.raises(JobSpecError, match="'./nope' is not a directory"):
        load_job(spec)
    (tmp_path / "nope").unlink()
    (tmp_path / "nope").mkdir()
    assert load_job(spec).data[0].local == "./nope"
    # a channel the program writes may not exist yet (the demo's generated data), but must not be a file
    spec.write_text(LOCAL_DATA.replace("./nope}", "./new, mode: rw}") + f"target: {{type: {target}}}\n")
    assert load_job(spec).data[0].mode == "rw"
    (tmp_path / "new").write_text("a file")
    with pytest.raises(JobSpecError, match="'./new' is not a directory"):
        load_job(spec)


def test_local_data_channel_of_an_ssh_job_is_not_checked_here(tmp_path):
    """On target ssh the directory is on the remote hosts; the spec text alone is never checked (pure)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(LOCAL_DATA + "target: {type: ssh, ssh: {hosts: [h1]}}\n")
    assert load_job(spec).data[0].local == "./nope"
    assert load_job_text(LOCAL_DATA, "job.yaml").data[0].local == "./nope"


# --- contradictions ---------------------------------------------------------------------

SM = HEAD + """\
target:
  type: sagemaker
  sagemaker: {role: "arn:aws:iam::1:role/r", output_s3: "s3://bucket/out"}
image: img:1
resources: {instance_type: ml.p4d.24xlarge, hosts: 2}
""" + PROG


def test_more_processes_than_gpus():
    assert errors(SM.replace("hosts: 2}", "hosts: 2, processes_per_host: 16}")) == [
        "job.yaml:8: resources.processes_per_host: 16 processes per host but ml.p4d.24xlarge has 8 GPUs; "
        "expected at most 8 (one rank per GPU), or set pinning: none to share GPUs"]


def test_fsx_without_subnets_and_subnets_without_groups():
    fsx = "data:\n  coco:\n    fsx: {file_system_id: fs-1, mount_name: abc, path: /coco}\n"
    assert errors(SM + fsx) == [
        "job.yaml:13: data.coco.fsx: an FSx channel needs the job inside the file system's VPC: set vpc.subnets "
        "(and vpc.security_groups)"]
    assert errors(SM + fsx + "vpc:\n  subnets: [subnet-1]\n") == [
        "job.yaml:14: vpc: vpc.subnets is set but vpc.security_groups is empty; SageMaker needs both (a group "
        "that allows all traffic to itself, for MPI and NCCL)"]


def test_sagemaker_required_settings():
    text = HEAD + PROG + "target:\n  type: sagemaker\nresources: {instance_type: p4d.24xlarge}\n"
    assert errors(text) == [
        "job.yaml:1: image: required for target sagemaker: the training image URI (ECR)",
        "job.yaml:6: target.sagemaker.output_s3: required for target sagemaker: an s3:// URI for output artifacts",
        "job.yaml:6: target.sagemaker.role: required for target sagemaker: an IAM role ARN SageMaker can assume",
        "job.yaml:8: resources.instance_type: SageMaker instance types start with 'ml.'; got 'p4d.24xlarge', did "
        "you mean 'ml.p4d.24xlarge'?",
    ]


def test_spot_rules():
    assert errors(SM + "spot: {enabled: true, max_wait_s: 100}\n") == [
        "job.yaml:11: spot.max_wait_s: 100 is less than target.sagemaker.max_run_s (86400); SageMaker needs "
        "max_wait_s >= max_run_s"]
    assert errors(HEAD + PROG + "spot: {enabled: true}\n") == [
        "job.yaml:6: spot.enabled: spot capacity exists only on target sagemaker; this job targets local"]


def test_program_needs_exactly_one_of_module_or_command():
    assert errors(HEAD + "program:\n  module: a\n  command: [b]\n") == [
        "job.yaml:4: program: set exactly one of 'module' (runs python -m MODULE) or 'command' (an argv list); "
        "got both"]


def test_local_channel_on_sagemaker_and_s3_on_local():
    assert errors(SM + "data:\n  d:\n    local: ./d\n") == [
        "job.yaml:13: data.d.local: a local directory channel cannot reach SageMaker hosts; use s3, efs or fsx, "
        "or submit with --target local/sim/ssh"]
    assert errors(HEAD + PROG + "data:\n  d:\n    s3: s3://bucket/x\n") == [
        "job.yaml:8: data.d.s3: a s3 channel is provisioned only by target sagemaker (this job targets local); "
        "add a 'local' directory for it or use --target sagemaker"]


def test_target_override_is_checked():
    assert errors(HEAD + PROG + "resources: {hosts: 3}\n", target="ssh") == [
        "job.yaml:1: target.ssh.hosts: required for target ssh: a list of hosts ('name' or 'name:slots')"]
    assert errors(HEAD + PROG + "resources: {hosts: 3}\n") == [
        "job.yaml:6: resources.hosts: target local runs on this machine only, got 3 hosts; use target sim to "
        "simulate several hosts, or ssh/sagemaker for real ones"]


def test_ssh_host_count_mismatch():
    text = HEAD + PROG + "target:\n  type: ssh\n  ssh: {hosts: [a, b]}\nresources: {hosts: 3}\n"
    assert errors(text) == [
        "job.yaml:9: resources.hosts: 3 but target.ssh.hosts lists 2; drop resources.hosts or make them agree"]


def test_unknown_macro_and_channel():
    text = HEAD + "program:\n  module: m\n  args: ['${data:traen}', '${outptu}']\ndata:\n  train: {local: ./d}\n"
    assert errors(text) == [
        "job.yaml:6: program.args[0]: ${data:traen} names no data channel; did you mean 'train'? channels: train",
        "job.yaml:6: program.args[1]: unknown reference ${outptu}; expected ${data:CHANNEL}, ${checkpoint}, "
        "${output} or ${stack:STACK.OutputKey}, or write $${outptu} for a literal ${outptu} (the shell's)",
    ]


def test_unknown_tuning_profile_and_version():
    assert errors(HEAD + PROG + "tuning: {profile: p4, aws_ofi_nccl: latest}\n") == [
        "job.yaml:6: tuning.aws_ofi_nccl: plugin version 'latest' is not a version; expected dotted numbers "
        "like '1.7.3'",
        "job.yaml:6: tuning.profile: tuning profile 'p4' is unknown; expected one of ['auto', 'cpu', 'g5', "
        "'none', 'p3', 'p3dn', 'p4d', 'p5']",
    ]


def test_message_header_lists_count():
    with pytest.raises(JobSpecError, match=r"^job.yaml: invalid job spec \(2 problem\(s\)\):\n  job.yaml:"):
        load_job_text(HEAD + PROG + "retries: -1\npinning: off\n", "job.yaml")


def test_published_schema_file_is_current():
    assert S.SCHEMA_PATH.read_text() == S.schema_text(), \
        "run `python -m mpirun_kit.cli.schema` to republish job.schema.json"


def test_more_contradictions():
    assert errors(HEAD + PROG + "data:\n  d: {mode: ro}\n") == [
        "job.yaml:7: data.d: set exactly one of s3, efs, fsx, local; got none"]
    # words, not a Python list (issue 22 defect 7: no Python reprs in messages)
    assert errors(HEAD + PROG + "data:\n  d: {s3: 's3://bucket/x', local: /tmp}\n") == [
        "job.yaml:7: data.d: set exactly one of s3, efs, fsx, local; got s3 and local"]
    assert errors(SM + "data:\n  d: {s3: 's3://bucket/x', mode: rw}\n") == [
        "job.yaml:12: data.d.mode: S3 channels are read-only (File mode); use mode: ro or an EFS/FSx channel"]
    assert errors(HEAD + PROG + "target:\n  type: ssh\n  ssh: {hosts: [a]}\nretries: 2\n") == [
        "job.yaml:9: retries: retries are supported by targets local, sim and sagemaker; set 0 for ssh"]
    assert errors(HEAD + PROG, target="aws") == ["job.yaml: --target: expected one of local, sim, ssh, sagemaker, slurm; got 'aws'"]


def test_control_characters():
    assert errors("name: \x07\n") == [
        "job.yaml: not valid YAML: unacceptable character #x0007: special characters are not allowed\n"
        "  in \"<unicode string>\", position 6; remove control characters"]


def test_hostile_yaml_graphs():
    assert errors(HEAD + "program: &p {module: m, args: *p}\n") == [
        "job.yaml:4: program.args: an anchor is used inside itself (a recursive alias); a spec must be a plain tree"]
    assert errors("a: " + "[" * 40 + "]" * 40 + "\n") == [
        "job.yaml:1: a[0][0]...: nested more than 32 levels deep; no spec key goes that deep"]
    assert errors("x: &a {b: 1}\ny: *a\n") == [
        "job.yaml:2: y: YAML aliases (*name) are not accepted in a spec (each can multiply the file's size); "
        "write the value out"]


def test_an_alias_bomb_is_refused_without_expanding_it():
    """Each level lists the previous one 9 times: 9**8 leaves from a 400-byte file if it were expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    assert errors(HEAD + PROG + "\n".join(lines) + "\n") == [
        "job.yaml:6: a1[0]: YAML aliases (*name) are not accepted in a spec (each can multiply the file's size); "
        "write the value out"]


def test_a_huge_spec_is_refused_before_parsing(tmp_path):
    big = HEAD + PROG + "description: '" + "x" * (1 << 20) + "'\n"
    assert errors(big) == [f"job.yaml: {len(big)} characters; a spec is at most 1048576 (a few KiB is usual): "
                           "is this the right file?"]
    (tmp_path / "big.yaml").write_text(big)
    with pytest.raises(JobSpecError, match=rf"big.yaml: {len(big)} bytes; a spec is at most 1048576 bytes"):
        load_job(tmp_path / "big.yaml")


def test_host_names_starting_with_a_dash_never_reach_ssh(capsys):
    assert errors(HEAD + PROG + "target:\n  type: ssh\n  ssh: {hosts: [a, '-oProxyCommand=x']}\n") == [
        "job.yaml:8: target.ssh.hosts[1]: expected 'name' or 'name:slots' (no whitespace; not starting with '-'); "
        "got string '-oProxyCommand=x'"]
    # The other ways a host list arrives: --hosts/hostfiles and SageMaker's resourceconfig.
    from mpirun_kit.cluster.hostfile import parse_hosts_arg
    from mpirun_kit.cluster.sagemaker import parse_resource_config

    with pytest.raises(SpecError, match=r"^--hosts:1: cannot parse '-oProxyCommand=x'; expected 'HOST' or"):
        parse_hosts_arg("-oProxyCommand=x,algo-2")
    with pytest.raises(SpecError, match=r"^rc.json: field 'hosts' holds \['algo-1', '-oProxyCommand=x'\]; a host name "
                                        r"has no whitespace and does not start with '-'$"):
        parse_resource_config({"current_host": "algo-1", "hosts": ["algo-1", "-oProxyCommand=x"]}, "rc.json")
    # ... and the operator tools that ssh to hosts or pin them: doctor --hosts, keys install --hosts.
    from mpirun_kit.cli.main import main
    from mpirun_kit.exec.sshkeys import resolve_addresses

    assert main(["doctor", "--hosts", "algo-1,-oProxyCommand=x"]) == 64
    assert "--hosts: host name '-oProxyCommand=x' starts with '-'; expected names like algo-1" in capsys.readouterr().err
    with pytest.raises(SpecError, match=r"keys install: host name '-oProxyCommand=x' has whitespace or a comma, "
                                        r"or starts with '-'"):
        resolve_addresses(["-oProxyCommand=x"])
