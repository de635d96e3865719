"""MkDocs hook: fills the pages' generated blocks from the code they describe.

A page writes ``<!-- generated: NAME -->`` on a line of its own; the built site shows
the block NAME produces, so the states diagram, the exit-code table, the error tree and
the JSON schemas can never drift from the code that defines them. ``tests/test_docs.py``
runs the same functions.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph_effects import errors
from langgraph_effects._runtime.shapes import SHAPES, json_schema
from langgraph_effects.core.exitcodes import TABLE
from langgraph_effects.core.operation import mermaid


def states() -> str:
    """The operation state diagram, from the transition table."""
    return f"```mermaid\n{mermaid()}\n```"


def exit_codes() -> str:
    """The console's one exit-code table."""
    rows = "\n".join(f"| {int(code)} | {text} |" for code, text in TABLE)
    return f"| code | meaning |\n|---|---|\n{rows}"


def error_classes() -> list[tuple[int, type[BaseException]]]:
    """Every class of ``errors.py`` under ``EffectsError``, depth first in the order the
    module defines them, with its depth (``EffectsError`` is 0)."""
    defined = [c for c in vars(errors).values() if isinstance(c, type) and c.__module__ == errors.__name__]
    order = {cls: i for i, cls in enumerate(defined)}

    def walk(cls: type[BaseException], depth: int) -> list[tuple[int, type[BaseException]]]:
        children = sorted((c for c in cls.__subclasses__() if c in order), key=order.__getitem__)
        return [(depth, cls), *(row for child in children for row in walk(child, depth + 1))]

    return walk(errors.EffectsError, 0)


def error_tree() -> str:
    """The exception hierarchy as nested bullets, each with its docstring's first line."""
    lines = []
    for depth, cls in error_classes():
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        anchor = f"api.md#langgraph_effects.errors.{cls.__name__}"
        lines.append(f"{'    ' * depth}- [`{cls.__name__}`]({anchor}): {summary}")
    return "\n".join(lines)


def json_shapes() -> str:
    """Each published JSON shape: its description and its JSON Schema."""
    parts = []
    for name, shape in SHAPES.items():
        summary = " ".join((shape.__doc__ or "").split())
        schema = json.dumps(json_schema(name), indent=2)
        parts.append(f"## `{name}`\n\n{summary}\n\n```json\n{schema}\n```")
    return "\n\n".join(parts)


ROOT = Path(__file__).resolve().parents[2]
#: What ``python benchmarks/run.py --json docs/_data/benchmark.json`` wrote.
BENCHMARK_JSON = ROOT / "docs" / "_data" / "benchmark.json"


def benchmark() -> str:
    """The benchmark's table, rendered from its JSON by the benchmark's own renderer."""
    spec = importlib.util.spec_from_file_location("_bench_report", ROOT / "benchmarks" / "bench_report.py")
    if spec is None or spec.loader is None:
        raise ValueError("benchmarks/bench_report.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    report = json.loads(BENCHMARK_JSON.read_text())
    return f"```text\n{module.render(report)}\n```"


BLOCKS: dict[str, Callable[[], str]] = {
    "states": states,
    "exit-codes": exit_codes,
    "benchmark": benchmark,
    "errors": error_tree,
    "json-schemas": json_shapes,
}
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", flags=re.M)


def expand(markdown: str) -> str:
    """``markdown`` with every generated marker replaced by its block."""

    def block(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r}; known: {', '.join(BLOCKS)}")
        return BLOCKS[name]()

    return MARKER.sub(block, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)
