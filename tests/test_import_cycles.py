"""No module of ``langgraph_effects/_runtime/`` imports its caller: the imports between
them, at module level or inside a function (``TYPE_CHECKING`` blocks left out), form
no cycle, so the package reads bottom up and no function-local import hides one."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "langgraph_effects"


def _name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _targets(node: ast.Import | ast.ImportFrom, package: str, paths: set[str]) -> set[str]:
    """The modules of the package an import statement in ``package`` names."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in paths}
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1] if node.level else []
    target = ".".join([*base, *([node.module] if node.module else [])])
    return {t for t in (target, *(f"{target}.{a.name}" for a in node.names)) if t in paths}


@cache
def _imports(root: Path) -> dict[str, set[str]]:
    """Each module of the package at ``root`` -> the modules of it it imports, anywhere
    in its body except under ``if TYPE_CHECKING:``."""
    paths = {_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        graph[name] = {
            target
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in typing_only
            for target in _targets(node, package, set(paths))
        } - {name}
    return graph


def _cycles(graph: dict[str, set[str]], within: str) -> list[list[str]]:
    """One cycle through each edge between modules under ``within`` that closes one."""
    found = []
    for source in sorted(graph):
        for target in sorted(graph[source]):
            if not (source.startswith(within) and target.startswith(within)):
                continue
            back: dict[str, str | None] = {target: None}
            stack = [target]
            while stack and source not in back:
                node = stack.pop()
                for nxt in graph.get(node, ()):
                    if nxt.startswith(within) and nxt not in back:
                        back[nxt] = node
                        stack.append(nxt)
            if source in back:
                path: list[str] = [source]
                while (step := back[path[-1]]) is not None:
                    path.append(step)
                found.append([source, *reversed(path)])
    return found


def test_no_runtime_module_imports_its_caller() -> None:
    graph = _imports(PACKAGE)
    cycles = _cycles(graph, "langgraph_effects._runtime.")
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_graph_sees_the_runtime_and_function_local_imports(tmp_path: Path) -> None:
    """Guards the test above against passing vacuously: the session's imports are seen,
    and a cycle closed inside a function is found."""
    graph = _imports(PACKAGE)
    assert {"langgraph_effects._runtime.dispatch", "langgraph_effects._runtime.undo"} <= graph[
        "langgraph_effects._runtime.session"
    ]
    fake = tmp_path / "pkg"
    (fake / "_runtime").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "_runtime" / "__init__.py").write_text("")
    (fake / "_runtime" / "a.py").write_text("from .b import f\n")
    (fake / "_runtime" / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (fake / "_runtime" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n"
    )
    cycles = _cycles(_imports(fake), "pkg._runtime.")
    assert ["pkg._runtime.a", "pkg._runtime.b", "pkg._runtime.a"] in cycles
    assert not any("pkg._runtime.c" in c for c in cycles)
