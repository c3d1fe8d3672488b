"""Per-job ssh key material: how the hosts of one job trust each other with no key in the image.

Place in the data flow::

    operator: `mpirun_kit keys new` (ops/make-job-keys.sh)  ->  job secret file (32 random bytes, hex)
    delivery: the job's own input channel (S3 object, SSE-KMS) or its FSx/EFS path
    each host: derive_material(secret, job)     ->  KeyMaterial      (pure, deterministic)
               plan_install(material, hosts)    ->  tuple[KeyFile]   (pure: paths, modes, text)
               write_files(files)                    the only side effect; atomic, modes set first
               exec/sshd.sshd_argv(listen_address=)  ->  argv for sshd on the cluster interface

Every host derives the *same* user key pair and the *same* host key pair from the
secret and the job name (HMAC-SHA256 seeds fed to Ed25519), so nothing has to be
exchanged at start-up: no master-generates-then-distributes race, no
StrictHostKeyChecking=no.  The user key is what mpirun's ssh presents; the host key
is what every sshd presents, and known_hosts pins it for every peer by name.

Threat model
------------
* Someone who can pull the image: it holds no private key, no authorized key and no
  host key (docker/Dockerfile deletes the install-time host keys), so it grants
  nothing.
* Someone who can read the job's definition (DescribeTrainingJob, hyperparameters,
  the job name): the job name is public and only salts the derivation; without the
  secret no key follows from it.  The secret never travels in hyperparameters or
  environment variables, only as a file readable by the job's IAM role.
* A host on the same network that is not in the job, even one that holds the job's
  key (another job under the same IAM role can read what this job's role can):
  authorized_keys carries `from="<the job's host addresses>"` (every host name
  resolved when the keys are installed, plus loopback), so sshd refuses the key
  from any other address; and `restrict` (no forwarding, no pty).  sshd listens on
  the cluster interface only (loopback by default, see docker/sshd_config),
  key-only, no passwords.  The host key is pinned, so it cannot pose as a peer either.
* A key leaked from an earlier job: keys are bound to (secret, job name); a new job
  gets a new secret from ops/make-job-keys.sh, stored under a prefix of its own
  (``.../<job>/job-secret``) and deleted after the job (``make-job-keys.sh --delete``),
  and even a reused secret yields different keys under a different job name.
* Out of scope: code running inside the job (it runs as root next to the key, as
  the training script must), and whoever can write the job's input channel (they
  can already change what the job runs).
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..core.files import write_atomic
from .sshd import check_listen_address, listen_address_text
from ..errors import ClusterError, SpecError

#: bytes of randomness in a job secret (hex-encoded in its file).
SECRET_BYTES = 32
#: where sshd finds the job's host key; docker/sshd_config names the same path.
HOST_KEY_PATH = "/etc/ssh/mpirun_kit/ssh_host_ed25519_key"
#: sshd drop-in naming the cluster address; docker/sshd_config includes sshd_config.d/*.conf.
LISTEN_CONFIG_PATH = "/etc/ssh/sshd_config.d/50-mpirun-kit-listen.conf"
#: the file name of the secret inside its channel or directory.
SECRET_FILE_NAME = "job-secret"
#: where the secret appears on a SageMaker host when passed as input channel `mpirun-keys`.
SAGEMAKER_SECRET_PATH = f"/opt/ml/input/data/mpirun-keys/{SECRET_FILE_NAME}"

# Domain separation: the user key and the host key come from one secret but must
# never be the same key (a host key is shown to anyone who connects).
_LABEL_USER = b"mpirun_kit ssh user key v1"
_LABEL_HOST = b"mpirun_kit ssh host key v1"


@dataclass(frozen=True)
class KeyMaterial:
    """The ssh keys of one job.  Private halves are kept out of repr() so logs never show them."""

    job: str
    user_public: str
    host_public: str
    user_private: str = field(repr=False)
    host_private: str = field(repr=False)

    @property
    def user_fingerprint(self) -> str:
        return fingerprint(self.user_public)

    @property
    def host_fingerprint(self) -> str:
        return fingerprint(self.host_public)


@dataclass(frozen=True)
class KeyFile:
    """One file to write: where, with which mode, what text; ``secret`` files are redacted in dry-runs."""

    path: str
    mode: int
    content: str = field(repr=False)
    secret: bool = False

    def describe(self) -> str:
        body = "<private key, not shown>" if self.secret else self.content.rstrip("\n")
        return f"{self.path} (mode {self.mode:04o}):\n  " + body.replace("\n", "\n  ")


def format_secret(secret: bytes) -> str:
    """The text of a secret file: hex and a newline."""
    return secret.hex() + "\n"


def parse_secret(text: str, source: str = "job secret") -> bytes:
    """Reads a secret file's text back; rejects anything that is not 32 bytes of hex.

    Raises:
        SpecError: naming ``source``, what was found and how to make a valid secret.
    """
    value = text.strip()
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raw = b""
    if len(raw) != SECRET_BYTES:
        raise SpecError(
            f"{source}: expected {SECRET_BYTES * 2} hex characters (a {SECRET_BYTES}-byte job secret), "
            f"got {len(value)} characters; create one with `mpirun_kit keys new --out {source}`")
    return raw


def _ed25519_from_seed(seed: bytes, comment: str) -> tuple[str, str]:
    """(OpenSSH private key text, "ssh-ed25519 AAAA... comment") for a 32-byte seed."""
    # Imported here: cryptography is a paramiko dependency, but only key work needs it.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(seed)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    return private, f"{public} {comment}"


def derive_material(secret: bytes, job: str) -> KeyMaterial:
    """The job's user and host key pairs, the same on every host given the same secret and job.

    Raises:
        SpecError: the secret has the wrong length, or the job name is empty or has whitespace.
    """
    if len(secret) != SECRET_BYTES:
        raise SpecError(f"job secret: expected {SECRET_BYTES} bytes, got {len(secret)}; "
                        "create one with `mpirun_kit keys new`")
    if not job or any(c.isspace() for c in job):
        raise SpecError(f"job name {job!r}: expected a non-empty name without whitespace "
                        "(the training job name, e.g. TRAINING_JOB_NAME on SageMaker)")
    salt = job.encode()
    user_seed = hmac.new(secret, _LABEL_USER + b"\0" + salt, hashlib.sha256).digest()
    host_seed = hmac.new(secret, _LABEL_HOST + b"\0" + salt, hashlib.sha256).digest()
    user_private, user_public = _ed25519_from_seed(user_seed, f"mpirun_kit-user@{job}")
    host_private, host_public = _ed25519_from_seed(host_seed, f"mpirun_kit-host@{job}")
    return KeyMaterial(job=job, user_public=user_public, host_public=host_public,
                       user_private=user_private, host_private=host_private)


def fingerprint(public_line: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key line ("SHA256:..."), as ssh-keygen -l prints it."""
    import base64

    parts = public_line.split()
    if len(parts) < 2:
        raise SpecError(f"public key {public_line!r}: expected 'TYPE BASE64 [comment]'")
    digest = hashlib.sha256(base64.b64decode(parts[1])).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


#: loopback is in every from= list: a host may ssh to itself (doctor, a one-host hostfile).
LOOPBACK = ("127.0.0.1", "::1")


def check_hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    """``hosts`` as a tuple, checked before any is resolved or written.

    Raises:
        SpecError: no hosts, or a host name with whitespace or a comma, or starting with '-'.
    """
    hosts = tuple(hosts)
    if not hosts:
        raise SpecError("keys install: no hosts; pass every host of the job, e.g. --hosts algo-1,algo-2")
    for h in hosts:
        if not h or h.startswith("-") or any(c.isspace() or c == "," for c in h):
            raise SpecError(f"keys install: host name {h!r} has whitespace or a comma, or starts with '-'; "
                            "expected names as in /etc/hosts, e.g. algo-1")
    return hosts


def _unmapped(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``::ffff:A.B.C.D`` as ``A.B.C.D``: sshd matches a v4 client of a dual-stack socket as IPv4, so the mapped
    form (an /etc/hosts may name a host for it, as sim/layout.py does) would be a from= entry that never matches."""
    return getattr(addr, "ipv4_mapped", None) or addr


def resolve_addresses(hosts: Sequence[str], *, timeout_s: float = 120.0, clock: Clock = SYSTEM_CLOCK,
                      resolve: Callable[..., list] = socket.getaddrinfo) -> tuple[str, ...]:
    """Every address the job's host names resolve to (plus loopback), for authorized_keys' ``from=``.

    Hosts whose names do not resolve yet (cluster DNS comes up with the hosts) are retried
    until ``timeout_s``.

    Raises:
        ClusterError: naming each host that never resolved and the last error.
    """
    hosts = check_hosts(hosts)
    deadline = Deadline(clock, timeout_s)
    found: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    while True:
        for h in hosts:
            if h in found:
                continue
            try:
                infos = resolve(h, None, 0, socket.SOCK_STREAM)
            except (OSError, UnicodeError) as exc:
                errors[h] = str(exc) or type(exc).__name__
                continue
            found[h] = [str(_unmapped(ipaddress.ip_address(info[4][0].split("%")[0]))) for info in infos]
            errors.pop(h, None)
        missing = [h for h in hosts if h not in found]
        if not missing:
            break
        if deadline.expired():
            raise ClusterError("keys install: host name(s) did not resolve within "
                               f"{timeout_s:g}s: " + "; ".join(f"{h}: {errors[h]}" for h in missing)
                               + "; authorized_keys admits the job's key only from the job's host addresses, so every "
                               "host must resolve (check /etc/hosts or DNS, or raise --resolve-timeout-s)")
        clock.sleep(min(1.0, max(0.0, deadline.remaining())))
    return tuple(dict.fromkeys([a for h in hosts for a in found[h]] + list(LOOPBACK)))


def plan_install(material: KeyMaterial, hosts: tuple[str, ...] | list[str], ssh_dir: str = "/root/.ssh",
                 host_key_path: str = HOST_KEY_PATH, listen_address: str | None = None,
                 listen_config_path: str = LISTEN_CONFIG_PATH,
                 from_addresses: Sequence[str] | None = None) -> tuple[KeyFile, ...]:
    """Every file a host needs to serve and use the job's ssh, as values (nothing is written).

    Args:
        material: from derive_material.
        hosts: every host name of the job (peers are pinned by name in known_hosts).
        ssh_dir: the login user's ~/.ssh.
        host_key_path: where sshd_config's HostKey points.
        listen_address: the cluster interface's address; when given, an sshd drop-in
            (``listen_config_path``) makes sshd listen there as well as on loopback, so
            an sshd started with the image's config alone serves the cluster.
        from_addresses: the job's host addresses (``resolve_addresses``); authorized_keys
            then admits the key from those addresses only.  None admits it from anywhere
            (only for callers that restrict access otherwise; the CLI always passes them).

    Raises:
        SpecError: no hosts, a host name with whitespace, a comma or a leading '-', an entry
            of ``from_addresses`` that is not an IP address, or a wildcard listen address.
    """
    hosts = check_hosts(hosts)
    restrict = "restrict"
    if from_addresses is not None:
        try:
            addrs = [str(ipaddress.ip_address(a)) for a in from_addresses]
        except ValueError as exc:
            raise SpecError(f"keys install: {exc}; from= takes IP addresses only (resolve host names first)") from exc
        if not addrs:
            raise SpecError("keys install: no host addresses for from=; expected every host's address")
        restrict = f'from="{",".join(addrs)}",restrict'
    host_pub = " ".join(material.host_public.split()[:2])
    ssh = Path(ssh_dir)
    listen: tuple[KeyFile, ...] = ()
    if listen_address is not None:
        check_listen_address(listen_address)
        listen = (KeyFile(listen_config_path, 0o644, f"ListenAddress {listen_address_text(listen_address)}\n"),)
    return listen + (
        KeyFile(str(ssh / "id_ed25519"), 0o600, material.user_private, secret=True),
        KeyFile(str(ssh / "id_ed25519.pub"), 0o644, material.user_public + "\n"),
        # restrict: mpirun only runs commands; no forwarding, no pty, no ~/.ssh/rc.
        # from=: the key is refused from any address that is not one of the job's hosts.
        KeyFile(str(ssh / "authorized_keys"), 0o600, f"{restrict} {material.user_public}\n"),
        KeyFile(str(ssh / "known_hosts"), 0o644, f"{','.join(hosts)} {host_pub}\n"),
        KeyFile(host_key_path, 0o600, material.host_private, secret=True),
        KeyFile(host_key_path + ".pub", 0o644, material.host_public + "\n"),
    )


def write_files(files: tuple[KeyFile, ...] | list[KeyFile]) -> None:
    """Writes each file atomically with its mode set before any content lands.

    Parent directories are created 0700 (sshd's StrictModes rejects a group- or
    world-writable ~/.ssh); an existing ~/.ssh is tightened to 0700.
    """
    for f in files:
        parent = Path(f.path).parent
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if parent.name == ".ssh":
            os.chmod(parent, 0o700)
        # Created 0600 and switched in by a rename: a private key is never readable by others.
        write_atomic(f.path, f.content, f.mode)
