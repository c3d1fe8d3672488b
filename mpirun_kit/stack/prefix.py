"""Whose stacks these are: the stack-name prefix a user chooses, and what the names ``mrk-*`` stand for.

Place in the data flow: the CLI (cli/resolve.py ``stack_names``) reads where the user's configuration
lives (``MPIRUN_KIT_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/mpirun_kit``, else ``~/.config/mpirun_kit``) and
who the user is, and asks ``load_stack_names`` for the prefix: the configuration file's
``stack_prefix``, or, the first time, ``mrk-<user>`` written there once.  ``StackNames.of`` then maps a
stack name as written, in a job spec (``${stack:mrk-vpc.VpcId}``, stack/resolve.py) or on the
``stack`` command line (``stack deploy mrk-vpc``, cli/stack.py), to its name in CloudFormation:
``mrk-`` stands for the prefix, so two people on one account deploy ``mrk-alice-vpc`` and
``mrk-bob-vpc`` from the same specs and commands.  Other names are taken as written.  Nothing here
reads the environment; the file is read and written only where the CLI says.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core.files import write_atomic
from ..errors import SpecError

#: a stack name that begins with this stands for one of the user's own stacks: MARK + "vpc" -> PREFIX-vpc
MARK = "mrk-"
#: the configuration file's key
KEY = "stack_prefix"
#: CloudFormation stack names are [A-Za-z][-A-Za-z0-9]*, at most 128; the prefix leaves room for "-role" and more
PREFIX_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,62}[A-Za-z0-9]|[A-Za-z]")


def config_file(config_dir: str | None, xdg_config_home: str | None, home: str) -> Path:
    """The user's configuration file: ``config_dir/config`` (MPIRUN_KIT_CONFIG_DIR), else
    ``$XDG_CONFIG_HOME/mpirun_kit/config``, else ``~/.config/mpirun_kit/config``."""
    if config_dir:
        return Path(config_dir) / "config"
    base = Path(xdg_config_home) if xdg_config_home else Path(home) / ".config"
    return base / "mpirun_kit" / "config"


def default_prefix(user: str) -> str:
    """``mrk-<user>``, the user's name lower-cased with what a stack name may not hold dropped (``mrk``
    when nothing is left)."""
    clean = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", user.lower())).strip("-")[:40].strip("-")
    return f"{MARK}{clean}" if clean else MARK.rstrip("-")


def check_prefix(prefix: str, where: str) -> str:
    """``prefix`` when it can begin a stack name.

    Raises:
        SpecError: naming ``where`` it came from, what a prefix may hold, and an example.
    """
    if not PREFIX_RE.fullmatch(prefix):
        raise SpecError(f"{where}: stack prefix {prefix!r} cannot begin a CloudFormation stack name; expected a "
                        "letter, then letters, digits and '-' (at most 64, not ending in '-'), e.g. "
                        f"{KEY} = mrk-alice")
    return prefix


def read_prefix(path: Path) -> str | None:
    """The ``stack_prefix = VALUE`` line of the configuration file, or None (no file, no such line).

    Raises:
        SpecError: a value that cannot begin a stack name (names the file and line).
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    for number, line in enumerate(text.splitlines(), 1):
        key, sep, value = line.partition("=")
        if sep and key.strip() == KEY:
            return check_prefix(value.strip().strip("\"'"), f"{path}:{number}")
    return None


def write_prefix(path: Path, prefix: str) -> None:
    """Set ``stack_prefix`` in the configuration file, keeping its other lines (the file is made 0600)."""
    check_prefix(prefix, KEY)
    lines = path.read_text().splitlines() if path.is_file() else [
        "# mpirun_kit configuration (docs/guide/stacks.md: stack names)"]
    out, done = [], False
    for line in lines:
        if line.partition("=")[0].strip() == KEY and "=" in line:
            line, done = f"{KEY} = {prefix}", True
        out.append(line)
    if not done:
        out.append(f"{KEY} = {prefix}")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "\n".join(out) + "\n", mode=0o600)   # the one atomic write: a fixed .tmp name could collide


@dataclass(frozen=True)
class StackNames:
    """The user's stack prefix and where it came from; ``of`` maps a written name to the stack's own."""

    prefix: str
    source: str

    def of(self, name: str) -> str:
        """``mrk-vpc`` -> ``PREFIX-vpc``; a name already beginning with ``PREFIX-``, or not with ``mrk-``,
        is the stack's own name."""
        if not name.startswith(MARK) or name.startswith(self.prefix + "-"):
            return name
        return f"{self.prefix}-{name[len(MARK):]}"

    def says(self, name: str) -> str:
        """Why ``name`` means ``of(name)``: for messages about a stack that is not there."""
        real = self.of(name)
        if real == name:
            return repr(name)
        return f"{real!r} ({name!r} as written: '{MARK}' stands for your stack prefix {self.prefix!r}, {self.source})"


#: the names as written, for code that is given no prefix (the library's callers, tests of other areas)
AS_WRITTEN = StackNames(MARK.rstrip("-"), "the names as written")


def load_stack_names(path: Path, user: str) -> tuple[StackNames, str | None]:
    """(the user's stack names, a line to say when the prefix was just chosen, else None).

    The prefix is the configuration file's ``stack_prefix``; without one, ``default_prefix(user)`` is
    written there once, so every later command (and the user, who may edit it) sees the same names.
    """
    found = read_prefix(path)
    if found is not None:
        return StackNames(found, f"from {path}"), None
    prefix = default_prefix(user)
    try:
        write_prefix(path, prefix)
    except OSError as exc:  # a read-only home: the names still work, for this command
        return StackNames(prefix, f"the default for {user!r}; not saved: {exc}"), None
    return (StackNames(prefix, f"from {path}"),
            f"stack prefix {prefix!r} (your stacks are {prefix}-vpc, {prefix}-role, ...; 'mrk-' in stack names "
            f"stands for it), saved in {path}; change it with `mpirun_kit stack prefix NEW`")
