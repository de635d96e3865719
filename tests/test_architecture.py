"""docs/architecture.md's path block lists exactly the modules one tool call through
``EffectMiddleware`` enters on the event-loop thread, as traced by
``benchmarks/trace_modules.py`` (a real turn: scripted model, ``create_agent``,
``AsyncEffectSqliteSaver``), so the page stays true when the code moves."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"


def _trace_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_trace_modules", ROOT / "benchmarks" / "trace_modules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _path_block() -> str:
    text = PAGE.read_text()
    section = text.split("## One tool call, module by module", 1)[1]
    return section.split("```", 2)[1]


def _listed_modules(block: str) -> set[str]:
    """Dotted module names of the ``*.py`` files the block names."""
    found = set()
    for path in re.findall(r"[\w/]+\.py\b", block):
        dotted = "langgraph_effects." + path.removesuffix(".py").replace("/", ".")
        found.add(dotted.removesuffix(".__init__"))
    return found


def test_the_page_lists_the_modules_one_middleware_call_enters() -> None:
    threads = _trace_script().trace("middleware")
    touched = set(threads["event loop"].modules)
    listed = _listed_modules(_path_block())
    assert listed == touched, (
        f"docs/architecture.md's path block is out of date: the call also enters "
        f"{sorted(touched - listed)}, and no longer enters {sorted(listed - touched)}"
    )


def test_the_trace_sees_the_whole_call() -> None:
    """Guards the test above against passing vacuously: the trace saw the middleware, the
    session and the ledger on the event loop, and the ledger's plan on its own thread."""
    threads = _trace_script().trace("middleware")
    loop = threads["event loop"]
    assert {
        "langgraph_effects._integrations.middleware",
        "langgraph_effects._runtime.session",
        "langgraph_effects._runtime.dispatch",
        "langgraph_effects.ledger.sqlite",
    } <= set(loop.modules)
    assert loop.switches > 0
    assert "langgraph_effects.ledger.sqlite" in threads["ledger"].modules
