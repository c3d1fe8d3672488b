"""The package's layering, read from the source: plan/ never reaches exec/ or targets/.

The plan is a pure value (house style): if a module of plan/ imported exec/ or
targets/, even through a third module, printing a plan would load the execution
layer (and planning could start doing I/O).  The graph is built from every
``import`` statement in mpirun_kit/ (module level and inside functions: a lazy
import is still a dependency; only an ``if __name__ == "__main__":`` block, which
importing never runs, is left out), so the test needs no import side effects.
"""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mpirun_kit"
FORBIDDEN = ("mpirun_kit.exec", "mpirun_kit.targets")


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_pkg else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_main_block(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """module -> the mpirun_kit modules it imports (``from X import y`` counts X and X.y when that is a module)."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        deps: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        tree.body = [n for n in tree.body if not _is_main_block(n)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(mod, path.name == "__init__.py", node)
                deps.add(target)
                deps.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files)
        # Importing a.b.c runs a/__init__ and a/b/__init__ too.
        closed = set()
        for d in deps:
            parts = d.split(".")
            closed.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        graph[mod] = {d for d in closed if d in files and d != mod}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` imports, directly or not -> the module that imports it (for the message)."""
    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        m = todo.pop()
        for d in graph.get(m, ()):
            if d not in seen:
                seen[d] = m
                todo.append(d)
    return seen


def _chain(seen: dict[str, str], start: str, end: str) -> str:
    path = [end]
    while path[-1] != start:
        path.append(seen[path[-1]])
    return " -> ".join(reversed(path))


def test_plan_never_imports_exec_or_targets():
    graph = import_graph()
    plan_modules = sorted(m for m in graph if m == "mpirun_kit.plan" or m.startswith("mpirun_kit.plan."))
    assert "mpirun_kit.plan.launch_plan" in plan_modules and "mpirun_kit.plan.jobplan" in plan_modules
    bad = []
    for m in plan_modules:
        seen = reachable(graph, m)
        bad += [_chain(seen, m, d) for d in sorted(seen) if d.startswith(FORBIDDEN)]
    assert bad == [], "plan/ must not reach the execution layer:\n" + "\n".join(bad)


def test_the_check_sees_an_indirect_import(tmp_path):
    # A plan module importing a helper that imports exec/ is caught, with the chain named.
    pkg = tmp_path / "mpirun_kit"
    for d in ("", "plan", "exec", "rank"):
        (pkg / d).mkdir(exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "exec" / "report.py").write_text("X = 1\n")
    (pkg / "rank" / "contract.py").write_text("from ..exec.report import X\n")
    (pkg / "plan" / "launch_plan.py").write_text("def f():\n    from ..rank import contract\n")
    seen = reachable(import_graph(pkg), "mpirun_kit.plan.launch_plan")
    assert _chain(seen, "mpirun_kit.plan.launch_plan", "mpirun_kit.exec.report") == (
        "mpirun_kit.plan.launch_plan -> mpirun_kit.rank.contract -> mpirun_kit.exec.report")


def test_rank_contract_is_stdlib_only():
    # Every rank imports it at start, and plan/ imports it: nothing else of the package.
    graph = import_graph()
    assert reachable(graph, "mpirun_kit.rank.contract").keys() <= {"mpirun_kit", "mpirun_kit.rank"}
