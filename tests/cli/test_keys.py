"""cli/keys.py: `keys new`, `keys show` and `keys install --dry-run` as a user runs them (through main()).

The key derivation is exec/sshkeys.py's (tests/exec/test_sshkeys.py, which also logs in with installed keys);
the refusals' texts are rows of tests/cli/test_main.py.  Here: what each action makes and prints.
"""
from __future__ import annotations

import json
import stat

from mpirun_kit.cli.main import main
from mpirun_kit.exec.sshkeys import derive_material, parse_secret


def _new(tmp_path, capsys):
    secret = tmp_path / "job-secret"
    assert main(["keys", "new", "--out", str(secret)]) == 0
    assert capsys.readouterr().err == f"wrote job secret {secret} (mode 600)\n"
    return secret


def test_new_writes_a_private_secret_and_never_overwrites_it_silently(tmp_path, capsys):
    secret = _new(tmp_path, capsys)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    first = secret.read_text()
    parse_secret(first)                                    # 32 bytes of hex
    assert main(["keys", "new", "--out", str(secret)]) == 64
    assert "exists; a job secret is never overwritten silently (pass --force" in capsys.readouterr().err
    assert secret.read_text() == first
    assert main(["keys", "new", "--out", str(secret), "--force"]) == 0
    assert secret.read_text() != first


def test_show_prints_the_jobs_public_keys_and_never_a_private_one(tmp_path, capsys):
    secret = _new(tmp_path, capsys)
    assert main(["keys", "show", "--secret-file", str(secret), "--job", "j1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    m = derive_material(parse_secret(secret.read_text()), "j1")
    assert shown == {"job": "j1", "user_public": m.user_public, "user_fingerprint": m.user_fingerprint,
                     "host_public": m.host_public, "host_fingerprint": m.host_fingerprint}
    main(["keys", "show", "--secret-file", str(secret), "--job", "j2"])
    text = capsys.readouterr().out
    assert "PRIVATE" not in text and m.user_fingerprint not in text   # another job, other keys


def test_install_dry_run_lists_the_files_with_private_keys_hidden(tmp_path, capsys):
    secret = _new(tmp_path, capsys)
    ssh = tmp_path / "ssh"
    assert main(["keys", "install", "--secret-file", str(secret), "--job", "j1", "--hosts", "algo-1,algo-2",
                 "--from", "10.0.0.1,10.0.0.2", "--ssh-dir", str(ssh), "--host-key", str(tmp_path / "hk"),
                 "--listen-config", str(tmp_path / "listen.conf"), "--dry-run", "--json"]) == 0
    files = json.loads(capsys.readouterr().out)
    assert not ssh.exists()                                 # a dry run writes nothing
    secret_rows = [f for f in files if f["secret"]]
    assert secret_rows and all(f["content"] is None and f["mode"] == "0600" for f in secret_rows)
    authorized = next(f for f in files if f["path"].endswith("authorized_keys"))
    assert 'from="10.0.0.1,10.0.0.2' in authorized["content"]
