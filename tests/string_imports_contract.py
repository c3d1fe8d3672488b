"""An import-linter contract type, ``string_imports``: imports by string are held to the folders' contracts too.

import-linter builds its graph from ``import`` statements only; ``importlib.import_module("pkg.mod")``,
``__import__`` and ``"pkg.mod:function"`` references are invisible to it, so one of them could carry an
import across folders that the layers forbid (issue 31 item 5).  This contract reads the package's source
and is broken by any import by string that crosses from one folder of the container to another (an import
within a folder, e.g. ``f"{__name__}.{name}"`` in a lazy registry, changes no contract) and by any whose
target cannot be read from the source.  Entry points are the declared way across: each entry point of the
named groups (setup.cfg ``[options.entry_points]``) must lead into one of ``entry_point_folders`` (a
program's own folder, whose imports the other contracts check) and to a module that exists.

setup.cfg names it ``contract_types = string_imports: tests.string_imports_contract.StringImportsContract``;
``lint-imports`` runs from the repository root, which it puts on ``sys.path``.  Not part of the package:
mpirun_kit does not depend on import-linter.
"""
from __future__ import annotations

import ast
import configparser
import importlib.util
import re
from pathlib import Path

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

_REF = re.compile(r"^[A-Za-z_]\w*(\.\w+)+:\w+$")           # "pkg.mod:function"
_IMPORTERS = {"import_module", "__import__"}


def _folder(module: str, container: str) -> str | None:
    """The container's top-level folder (or module) ``module`` belongs to; None outside the container."""
    parts = module.split(".")
    if parts[0] != container or len(parts) < 2:
        return None
    return parts[1]


def _same_folder_prefix(node: ast.expr) -> bool:
    """``f"{__name__}..."``, ``f"{__package__}..."`` or ``f".{...}"``: a name under the importing module's own
    package."""
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and str(first.value).startswith("."):
            return True     # f".{name}": relative to the calling module's package
        return (isinstance(first, ast.FormattedValue) and isinstance(first.value, ast.Name)
                and first.value.id in ("__name__", "__package__"))
    return False


def string_imports(source: str, module: str, container: str) -> list[tuple[int, str, str | None]]:
    """(line, what, target module or None when it cannot be read) for each import by string in ``source``.

    Same-folder imports (relative ones, ``__name__``/``__package__``-prefixed ones) are left out: they cross no
    folder.  Strings naming modules outside ``container`` (``__import__("json")``) are left out too.
    """
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name not in _IMPORTERS or not node.args:
                continue
            arg = node.args[0]
            what = f"{name}({ast.unparse(arg)})"
            if _same_folder_prefix(arg):
                continue
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                target = arg.value
                if target.startswith("."):
                    continue            # relative to the calling module's package: its own folder
                if target.split(".")[0] != container:
                    continue            # the standard library or another distribution
                found.append((node.lineno, what, target))
            else:
                found.append((node.lineno, what, None))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _REF.match(node.value):
            target = node.value.split(":")[0]
            if target.split(".")[0] == container:
                found.append((node.lineno, repr(node.value), target))
    return found


def entry_points_of(setup_cfg: Path, groups: set[str]) -> list[tuple[str, str, str]]:
    """(group, name, "module:function") for each entry point of ``groups`` declared in ``setup_cfg``."""
    cfg = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    cfg.optionxform = str
    cfg.read(setup_cfg)
    out = []
    if cfg.has_section("options.entry_points"):
        for group in sorted(groups):
            for line in cfg.get("options.entry_points", group, fallback="").splitlines():
                if "=" in line:
                    name, _, value = line.partition("=")
                    out.append((group, name.strip(), value.strip()))
    return out


class StringImportsContract(Contract):
    """No import by string crosses folders; entry points lead only into the named folders."""

    container = fields.StringField()
    entry_point_groups = fields.SetField(subfield=fields.StringField(), required=False)
    entry_point_folders = fields.SetField(subfield=fields.StringField(), required=False)

    def check(self, graph, verbose: bool) -> ContractCheck:
        spec = importlib.util.find_spec(self.container)
        root = Path(next(iter(spec.submodule_search_locations)))
        problems: list[str] = []
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            module = ".".join([self.container, *parts])
            here = _folder(module, self.container) if parts else None
            for line, what, target in string_imports(path.read_text(), module, self.container):
                if target is None:
                    problems.append(f"{module} (l.{line}): {what}: an import by a name made at run time; "
                                    "import it with an import statement, or prefix it with __name__ within its "
                                    "own folder")
                elif _folder(target, self.container) != here:
                    problems.append(f"{module} (l.{line}): {what} imports {target} from another folder "
                                    "by string, which import-linter cannot see; use an import statement (the "
                                    "layers then judge it) or an entry point")
        setup_cfg = Path.cwd() / "setup.cfg"
        allowed = set(self.entry_point_folders or ())
        for group, name, value in entry_points_of(setup_cfg, set(self.entry_point_groups or ())):
            target = value.split(":")[0].strip()
            if _folder(target, self.container) not in allowed:
                problems.append(f"entry point {name} in {group} leads to {target}, outside "
                                f"{', '.join(sorted(allowed))}")
            elif target not in graph.modules:
                problems.append(f"entry point {name} in {group} leads to {target}, which does not exist")
        return ContractCheck(kept=not problems, metadata={"problems": problems})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for problem in check.metadata["problems"]:
            output.print_error(f"-   {problem}", bold=False)
            output.new_line()
