"""Static checks of the training image (docker/): no Docker engine runs here, so the
Dockerfile is linted with hadolint and read as text; the scripts it installs run
as real processes (entry.sh, build.sh --dry-run) and sshd_config is checked by the
real sshd (`sshd -t` / `sshd -T`)."""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: continuations joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def stages(text: str) -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions (FROM included); global ARGs under ''."""
    result: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for word, rest in instructions(text):
        if word == "FROM":
            m = re.match(r"(\S+)\s+AS\s+(\S+)", rest, re.IGNORECASE)
            current = m.group(2) if m else rest
            result[current] = []
        result[current].append((word, rest))
    return result


def global_args(text: str) -> dict[str, str]:
    args = {}
    for word, rest in stages(text)[""]:
        if word == "ARG" and "=" in rest:
            k, _, v = rest.partition("=")
            args[k] = v.strip('"')
    return args


TEXT = DOCKERFILE.read_text()
STAGES = stages(TEXT)
FINAL = list(STAGES)[-1]


def test_hadolint_clean():
    proc = subprocess.run([str(HADOLINT), "-f", "json", str(DOCKERFILE)], capture_output=True, text=True)
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], findings
    assert proc.returncode == 0


def test_hadolint_ignores_carry_a_reason():
    lines = TEXT.splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            assert lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], \
                f"line {i + 1}: an inline hadolint ignore needs a comment above it saying why"


def test_multi_stage_build_then_runtime():
    assert list(STAGES)[1:] == ["build", "runtime"]
    assert STAGES["build"][0] == ("FROM", "${BASE_DEVEL} AS build")
    assert STAGES["runtime"][0] == ("FROM", "${BASE_RUNTIME} AS runtime")


def test_bases_pinned_by_exact_tag_or_digest():
    args = global_args(TEXT)
    for name in ("BASE_DEVEL", "BASE_RUNTIME"):
        image = args[name]
        assert "@sha256:" in image or re.search(r":\d+\.\d+\.\d+-", image), f"{name}={image} is not pinned"
        assert not image.endswith(":latest")
    # devel and runtime of one release: the extension's ABI matches the runtime torch.
    assert args["BASE_DEVEL"].replace("-devel", "") == args["BASE_RUNTIME"].replace("-runtime", "")
    assert "devel" not in args["BASE_RUNTIME"]


def test_build_tools_absent_from_final_stage():
    runs = " ".join(rest for word, rest in STAGES[FINAL] if word == "RUN")
    for tool in ("build-essential", "gcc", "g++", "cmake", "nvcc", "cuda-nvcc", "-dev ", "autoconf", "make "):
        assert tool not in runs, f"final stage installs build tool {tool!r}"
    # Everything compiled comes across as wheels from the build stage.
    assert ("COPY", "--from=build /wheels /tmp/wheels") in STAGES[FINAL]


def test_op_extension_compiled_for_sm80_and_sm90():
    env = " ".join(rest for word, rest in STAGES["build"] if word == "ENV")
    # PTX for the newest architecture: a newer GPU (sm_100) JIT-compiles it instead of failing
    # with "no kernel image is available for execution on the device".
    assert 'TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"' in env
    runs = [rest for word, rest in STAGES["build"] if word == "RUN"]
    assert any("--no-build-isolation" in r and "pip wheel" in r for r in runs)


def test_efa_stack_in_both_stages_with_open_mpi_4():
    for stage in ("build", "runtime"):
        assert ("COPY", "docker/install-efa.sh /tmp/install-efa.sh") in STAGES[stage]
        assert any(w == "RUN" and "install-efa.sh" in r for w, r in STAGES[stage])
    script = (DOCKER / "install-efa.sh").read_text()
    # the installer's documented form is --mpi=openmpi4 (its getopt takes the value after '=')
    assert "efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify --mpi=openmpi4" in script
    # libfabric and the aws-ofi-nccl plugin on the loader path.
    for path in ("/opt/amazon/efa/lib", "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"):
        assert path in script
    # mpi4py is compiled against the EFA installer's Open MPI 4 (the launcher's flavour).
    assert "MPICC=/opt/amazon/openmpi/bin/mpicc" in " ".join(r for _, r in STAGES["build"])
    env = " ".join(rest for word, rest in STAGES[FINAL] if word == "ENV")
    assert "PATH=/opt/amazon/openmpi/bin:" in env


def test_everything_copied_exists_and_passes_the_dockerignore():
    ignore = [ln.strip() for ln in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]

    def included(rel: str) -> bool:
        verdict = True
        for pat in ignore:
            neg = pat.startswith("!")
            p = pat[1:] if neg else pat
            if p == "**" or fnmatch.fnmatch(rel, p) or rel.startswith(p.rstrip("/") + "/") \
                    or (p.endswith("/") and rel == p.rstrip("/")):
                verdict = neg
        return verdict

    copied = 0
    for name, body in STAGES.items():
        for word, rest in body:
            if word != "COPY" or rest.startswith("--from="):
                continue
            *sources, _dest = rest.split()
            for src in sources:
                assert (REPO / src).exists(), f"COPY {src}: not in the repository"
                assert included(src.rstrip("/")), f"COPY {src}: excluded by Dockerfile.dockerignore"
                copied += 1
    assert copied >= 6
    # Key material never reaches the build context.
    for secret in ("root/.ssh/id_ed25519", "x/job-secret", "keys/server.pem"):
        assert not included(secret), secret


def test_no_secrets_baked_in():
    for word, rest in instructions(TEXT):
        if word in ("ENV", "ARG"):
            for key in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", rest) or [rest.split("=")[0]]:
                assert not re.search(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", key, re.IGNORECASE), f"{word} {key}"
        if word in ("COPY", "ADD"):
            assert not re.search(r"id_(rsa|ed25519|ecdsa)|\.pem\b|\.key\b|ssh_host_|authorized_keys", rest), rest
    # openssh-server's install-time host keys are deleted in the same layer.
    final_runs = [r for w, r in STAGES[FINAL] if w == "RUN" and "openssh-server" in r]
    assert final_runs and "rm -f /etc/ssh/ssh_host_*" in final_runs[0]


def test_entrypoint_resolves_to_the_per_host_entrypoint(tmp_path):
    final = dict((w, r) for w, r in STAGES[FINAL] if w in ("ENTRYPOINT", "CMD"))
    entry = json.loads(final["ENTRYPOINT"])
    assert entry[0] == "/usr/bin/tini" and entry[-1] == "/usr/local/bin/mpirun-kit-entry"
    assert json.loads(final["CMD"]) == ["train"]
    assert ("COPY", "docker/entry.sh /usr/local/bin/mpirun-kit-entry") in STAGES[FINAL]
    assert os.access(DOCKER / "entry.sh", os.X_OK)
    # Run the script with a stand-in `mpirun_kit` that records its argv.
    fake = tmp_path / "mpirun_kit"
    fake.write_text('#!/bin/sh\nprintf "%s|" "$@"\necho\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    out = subprocess.run(["bash", str(DOCKER / "entry.sh"), "train", "--x", "a b"], env=env,
                         capture_output=True, text=True, check=True).stdout
    # First the job's ssh keys, then the per-host entrypoint with the arguments untouched.
    assert out.splitlines() == ["keys|install|--sagemaker|", "entrypoint|--x|a b|"]
    out = subprocess.run(["bash", str(DOCKER / "entry.sh"), "echo", "hi"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out == "hi\n"
    proc = subprocess.run(["bash", str(DOCKER / "entry.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode == 64
    assert "no command; expected 'train' (SageMaker) or a command to run" in proc.stderr


def test_entrypoint_command_is_registered_in_the_cli():
    from mpirun_kit.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert "entrypoint" in sub.choices, "docker/entry.sh execs `mpirun_kit entrypoint`; the CLI has no such command"


def _sshd_config(tmp_path: Path) -> Path:
    """docker/sshd_config with its host key and drop-in directory pointed into tmp_path."""
    key = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "sshd_config.d").mkdir()
    cfg = tmp_path / "sshd_config"
    cfg.write_text((DOCKER / "sshd_config").read_text()
                   .replace("/etc/ssh/mpirun_kit/ssh_host_ed25519_key", str(key))
                   .replace("/etc/ssh/sshd_config.d/", f"{tmp_path}/sshd_config.d/"))
    # sshd -t insists on its privilege-separation directory (Debian's service unit makes it too).
    os.makedirs("/run/sshd", exist_ok=True)
    return cfg


def _effective(cfg: Path, *extra: str) -> dict[str, list[str]]:
    out = subprocess.run([SSHD, "-T", "-f", str(cfg), *extra], capture_output=True, text=True, check=True).stdout
    eff: dict[str, list[str]] = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        eff.setdefault(k, []).append(v)
    return eff


def test_sshd_config_key_only_and_loopback_unless_told(tmp_path):
    cfg = _sshd_config(tmp_path)
    subprocess.run([SSHD, "-t", "-f", str(cfg)], check=True)
    eff = _effective(cfg)
    assert eff["passwordauthentication"] == ["no"]
    assert eff["kbdinteractiveauthentication"] == ["no"]
    assert eff["pubkeyauthentication"] == ["yes"]
    assert eff["permitrootlogin"] == ["without-password"]
    assert eff["allowtcpforwarding"] == ["no"]
    assert eff["strictmodes"] == ["yes"]
    assert eff["listenaddress"] == ["127.0.0.1:22"]
    # The entrypoint adds the cluster address; nothing else is opened.
    eff = _effective(cfg, "-o", "ListenAddress=10.0.0.5")
    assert sorted(eff["listenaddress"]) == ["10.0.0.5:22", "127.0.0.1:22"]


def test_sshd_config_takes_the_listen_drop_in_keys_install_writes(tmp_path):
    from mpirun_kit.exec import sshkeys

    cfg = _sshd_config(tmp_path)
    m = sshkeys.derive_material(bytes(32), "j")
    snippet = sshkeys.plan_install(m, ["algo-1"], listen_address="10.0.0.7",
                                   listen_config_path=str(tmp_path / "sshd_config.d" / "50-listen.conf"))[0]
    sshkeys.write_files([snippet])
    assert sorted(_effective(cfg)["listenaddress"]) == ["10.0.0.7:22", "127.0.0.1:22"]
    assert sshkeys.LISTEN_CONFIG_PATH.startswith("/etc/ssh/sshd_config.d/")
    assert "Include /etc/ssh/sshd_config.d/*.conf" in (DOCKER / "sshd_config").read_text()


def test_sshd_config_host_key_path_is_where_keys_install_writes_it():
    from mpirun_kit.exec import sshkeys

    assert f"HostKey {sshkeys.HOST_KEY_PATH}" in (DOCKER / "sshd_config").read_text()


# --- build.sh ---------------------------------------------------------------------

def _build_sh(tmp_path: Path, version: str = "9.8.7") -> Path:
    """build.sh in a scratch tree (not a git checkout, so the tag is never -dirty)."""
    (tmp_path / "docker").mkdir()
    (tmp_path / "mpirun_kit").mkdir()
    shutil.copy(DOCKER / "build.sh", tmp_path / "docker" / "build.sh")
    (tmp_path / "mpirun_kit" / "__init__.py").write_text(f'__version__ = "{version}"\n' if version else "x = 1\n")
    return tmp_path / "docker" / "build.sh"


def _run_build(script: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(script.parent)}
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env)


def test_build_sh_dry_run_tags_with_the_package_version(tmp_path):
    script = _build_sh(tmp_path)
    proc = _run_build(script, "--dry-run", "--account", "123456789012", "--region", "us-west-2")
    assert proc.returncode == 0, proc.stderr
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit:9.8.7"
    assert proc.stdout.splitlines() == [
        f"+ docker build --file {tmp_path}/docker/Dockerfile --tag {image} "
        f"--label org.opencontainers.image.version=9.8.7 {tmp_path}",
        "+ aws ecr get-login-password --region us-west-2 | docker login --username AWS "
        "--password-stdin 123456789012.dkr.ecr.us-west-2.amazonaws.com",
        f"+ docker push {image}",
        image,
    ]


def test_build_sh_no_push_builds_a_local_tag(tmp_path):
    proc = _run_build(_build_sh(tmp_path), "--dry-run", "--no-push", "--repository", "mk")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "mk:9.8.7"


@pytest.mark.parametrize("args, code, message", [
    (("--dry-run", "--region", "us-west-2"), 2, "--dry-run needs --account ID"),
    (("--dry-run", "--account", "1"), 2, "no AWS region; pass --region"),
    (("--frobnicate",), 2, "unknown argument '--frobnicate'"),
])
def test_build_sh_errors(tmp_path, args, code, message):
    proc = _run_build(_build_sh(tmp_path), *args)
    assert proc.returncode == code
    assert message in proc.stderr


def test_build_sh_without_version(tmp_path):
    proc = _run_build(_build_sh(tmp_path, version=""), "--dry-run", "--no-push")
    assert proc.returncode == 64
    assert "no __version__ = \"...\" line in" in proc.stderr


def test_orted_found_by_a_non_interactive_ssh_command(tmp_path):
    """mpirun starts `orted` on each worker through ssh by name (it is called by name, not by
    absolute path, so Open MPI adds no --prefix): the worker's PATH is sshd's compiled-in default,
    since docker/sshd_config turns off UsePAM and PermitUserEnvironment and the image's ENV PATH
    does not reach ssh sessions.  The image links orted into /usr/local/bin, which that default holds."""
    runs = " ".join(rest for word, rest in STAGES[FINAL] if word == "RUN")
    assert "ln -s /opt/amazon/openmpi/bin/orted /usr/local/bin/orted" in runs
    eff = _effective(_sshd_config(tmp_path))
    assert (eff["usepam"], eff["permituserenvironment"]) == (["no"], ["no"])
    assert "setenv" not in eff or not any("PATH=" in v for v in eff["setenv"])
    # sshd's compiled-in PATH for sessions (OpenSSH _PATH_STDPATH / Debian's user path) has /usr/local/bin.
    binary = Path(SSHD).read_bytes()
    paths = re.findall(rb"/usr/local/s?bin:[/:a-z]+", binary)
    assert paths and all(b"/usr/local/bin" in p for p in paths), paths
