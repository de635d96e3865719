"""A tripwire, not a target: no module in ``langgraph_effects/`` over 900 lines and no
function over 100. The limits sit well above today's largest so that nobody packs code
to fit them; whether a module holds one subject is reviewed, not counted."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "langgraph_effects"
MAX_MODULE_LINES = 900
MAX_FUNCTION_LINES = 100


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_over_the_limit() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in _modules()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules (over {MAX_MODULE_LINES} lines): {long}"


def test_no_function_is_over_the_limit() -> None:
    long: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"] = lines
    assert not long, f"split these functions (over {MAX_FUNCTION_LINES} lines): {long}"


def test_the_limits_are_measured_on_the_package() -> None:
    # Guards the two tests above against passing vacuously (a moved package, a bad path).
    assert len(_modules()) > 40


def test_the_public_surface_resolves_and_is_documented() -> None:
    """Every name of ``langgraph_effects.__all__`` imports from the root and has a docstring,
    including ``maybe_current_operation`` (one tool for protected and plain graphs)."""
    import inspect

    import langgraph_effects

    public = set(langgraph_effects.__all__)
    assert {"current_operation", "maybe_current_operation", "OperationInfo", "MissingExtraError"} <= public
    assert len(public) == len(langgraph_effects.__all__), "a name is listed twice"
    undocumented = [
        name
        for name in sorted(public)
        if not (getattr(langgraph_effects, name).__doc__ or "").strip()
        and not isinstance(getattr(langgraph_effects, name), str | dict | frozenset | tuple)
    ]
    assert not undocumented, f"add docstrings to {undocumented}"
    from langgraph_effects import maybe_current_operation

    assert "protected" in (inspect.getdoc(maybe_current_operation) or "")
    assert maybe_current_operation() is None  # outside any effectful call
