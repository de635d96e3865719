"""Each name lives in one module.

A private module lists in ``__all__`` only what it defines: a class or function it
imports from elsewhere is used there, not offered from there. The public faces
are the exception, and they are few: the package roots (``langgraph_effects``, its
subpackages' ``__init__``), ``langgraph_effects.operator`` (the operator API),
``langgraph_effects.ledger.kit`` (what a backend is written against) and
``langgraph_effects.testing.conformance`` (the suite a backend runs).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil

import langgraph_effects

FACES = {
    "langgraph_effects.operator",
    "langgraph_effects.ledger.kit",
    "langgraph_effects.testing.conformance",
}
#: The lab and the crash test are programs, not library code.
PROGRAMS = ("langgraph_effects.lab", "langgraph_effects.crashtest")


def _modules() -> list[str]:
    found = []
    for info in pkgutil.walk_packages(langgraph_effects.__path__, "langgraph_effects."):
        if info.name.startswith(PROGRAMS) or info.name.endswith("__main__") or info.ispkg:
            continue
        found.append(info.name)
    return found


def _imported_names(source: str) -> set[str]:
    """The names a module binds by a module-level import."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def test_a_private_module_offers_only_what_it_defines() -> None:
    offered_elsewhere = []
    for name in _modules():
        if name in FACES:
            continue
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", ())
        source = importlib.util.find_spec(name).loader.get_source(name)  # type: ignore[union-attr]
        imported = _imported_names(source or "")
        offered_elsewhere += [f"{name} offers {n}, which it imports" for n in exported if n in imported]
    assert not offered_elsewhere, "\n".join(offered_elsewhere)


def test_the_check_sees_an_imported_name_offered_again() -> None:
    source = (
        "from .core.operation import Operation, State as S\n"
        "import json\n"
        "def own() -> None: ...\n"
        "__all__ = ['Operation', 'S', 'own']\n"
    )
    assert _imported_names(source) == {"Operation", "S", "json"}
