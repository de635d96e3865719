"""The README and the documentation site stay true: short front door, every link and
nav entry resolves, generated blocks come from the code, the architecture page names
only modules and functions that exist, and marked Python blocks run."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_effects.core.exitcodes import TABLE
from langgraph_effects.core.operation import mermaid

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _hooks() -> object:
    spec = importlib.util.spec_from_file_location("_docs_hooks", DOCS / "_hooks" / "generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md"))


def _nav() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1].split("\ntheme:", 1)[0]
    return re.findall(r":\s*([\w.-]+\.md)\s*$", nav, flags=re.M)


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert 'pip install -e ".[agents]" && langgraph-effects lab' in text  # the main job
    assert 'pip install -e ".[dev]" && pytest -n 4' in text  # the tests, all of them, in parallel


@pytest.mark.parametrize("path", [README, *_pages()], ids=lambda p: p.name)
def test_relative_links_resolve(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav = _nav()
    assert sorted(nav) == sorted(p.name for p in _pages())


def test_generated_blocks_come_from_the_code() -> None:
    hooks = _hooks()
    states = hooks.expand("<!-- generated: states -->")  # type: ignore[attr-defined]
    assert states == f"```mermaid\n{mermaid()}\n```"
    table = hooks.expand("<!-- generated: exit-codes -->")  # type: ignore[attr-defined]
    for code, text in TABLE:
        assert f"| {int(code)} | {text} |" in table
    with pytest.raises(ValueError, match="unknown generated block"):
        hooks.expand("<!-- generated: nowhere -->")  # type: ignore[attr-defined]
    assert "<!-- generated: states -->" in (DOCS / "states.md").read_text()
    # The performance page's table is the benchmark's own rendering of its committed JSON.
    bench = hooks.expand("<!-- generated: benchmark -->")  # type: ignore[attr-defined]
    assert bench.startswith("```text\nWhat safety costs:") and "+ms/call" in bench
    # ... with the issue-32 columns, and the same text the run printed (the JSON is current).
    assert "bare pair, " in bench and "pairs  target" in bench
    report = json.loads((DOCS / "_data" / "benchmark.json").read_text())
    assert bench == f"```text\n{report['table']}\n```"
    assert "<!-- generated: benchmark -->" in (DOCS / "performance.md").read_text()


def test_the_architecture_page_names_only_what_exists() -> None:
    text = (DOCS / "architecture.md").read_text()
    package = ROOT / "langgraph_effects"
    for name in set(re.findall(r"[\w/]+\.py\b", text)):
        candidates = [ROOT / name, package / name]
        assert any(c.exists() for c in candidates), f"architecture.md names {name}, which does not exist"
    modules = {p.stem for p in package.rglob("*.py")}
    for dotted in set(re.findall(r"`([a-z_]+)\.([A-Za-z_][\w.]*)`", text)):
        module_name, attrs = dotted
        if module_name not in modules or attrs == "py":
            continue
        found = [p for p in package.rglob(f"{module_name}.py")]
        assert found, module_name
        relative = found[0].relative_to(ROOT).with_suffix("")
        obj: object = importlib.import_module(".".join(relative.parts))
        for attr in attrs.split("."):
            assert hasattr(obj, attr), f"architecture.md names {module_name}.{attrs}, which does not exist"
            obj = getattr(obj, attr)


RUNS = re.compile(r"<!-- runs -->\n```python\n(.*?)```", flags=re.S)


@pytest.mark.slow
@pytest.mark.parametrize(
    "page, index",
    [(p.name, i) for p in _pages() for i, _ in enumerate(RUNS.findall(p.read_text()))],
)
def test_marked_python_blocks_run(page: str, index: int, tmp_path: Path) -> None:
    """A block preceded by ``<!-- runs -->`` claims to run as it is: it does."""
    code = RUNS.findall((DOCS / page).read_text())[index]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
