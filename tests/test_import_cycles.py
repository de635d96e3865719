"""No import cycle in the package, at any level.

A function-local import (``def f(): from .session import Session``) hides a cycle
from Python, which only fails when the module-level imports close it: the modules
still depend on each other, and neither can be read, tested or changed alone. This
test reads every module's imports, module-level and function-local alike (those
under ``if TYPE_CHECKING:`` are annotations only, and do not count), and fails on
any strongly connected group of modules, naming the imports that close it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import langgraph_effects

PACKAGE = Path(langgraph_effects.__file__).parent


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _annotations_only(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def import_graph() -> dict[str, dict[str, str]]:
    """module -> {module it imports: "module level" | "in a function"}, within the package."""
    modules = _modules()
    graph: dict[str, dict[str, str]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _annotations_only(tree)
        local = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_package, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != module:
                    where = "in a function" if id(node) in local else "module level"
                    graph.setdefault(module, {})[target] = where
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return groups


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    lines = []
    for group in found:
        lines.append("cycle: " + ", ".join(group))
        members = set(group)
        for module in group:
            for target, where in sorted(graph.get(module, {}).items()):
                if target in members:
                    lines.append(f"    {module} imports {target} ({where})")
    assert not found, "\n".join(lines)


def test_the_check_sees_a_cycle_closed_in_a_function() -> None:
    """The reader itself: a cycle closed by a function-local import is found."""
    graph = {"p.a": {"p.b": "module level"}, "p.b": {"p.a": "in a function"}, "p.c": {"p.a": "module level"}}
    assert cycles(graph) == [["p.a", "p.b"]]
    assert cycles({"p.a": {"p.b": "module level"}}) == []
