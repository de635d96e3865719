"""The README and the documentation site stay true: short front door, every link and
nav entry resolves, generated blocks come from the code, the architecture page names
only modules and functions that exist, and marked Python blocks run."""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import errors
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


# -- the API reference and the pages that describe the code -----------------------------

SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):`")


def _rendered() -> list[str]:
    """Every object a page renders with ``::: name`` (the API reference's entries)."""
    entry = re.compile(r"^::: ([\w.]+)\s*$", flags=re.M)
    return sorted({name for page in _pages() for name in entry.findall(page.read_text())})


def _docstrings(obj: Any, seen: set[str]) -> Iterator[tuple[str, str]]:
    """``(path, docstring)`` of ``obj`` and of every public member it renders."""
    if obj.is_alias:
        obj = obj.final_target
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None:
        yield obj.path, obj.docstring.value
    for name, member in obj.members.items():
        if name.startswith("_") or (obj.is_module and (member.is_alias or member.is_module)):
            continue
        yield from _docstrings(member, seen)


def test_public_docstrings_use_markdown_cross_references_not_sphinx_roles() -> None:
    """mkdocstrings renders Markdown: a ``:class:`X``` role would show raw in the API
    reference. Every object it renders, and each of their public members, is checked."""
    griffe = pytest.importorskip("griffe")
    package = griffe.load("langgraph_effects", docstring_parser="google")
    seen: set[str] = set()
    raw = []
    for name in _rendered():
        assert name.startswith("langgraph_effects"), name
        inner = name.removeprefix("langgraph_effects").lstrip(".")
        obj = package[inner] if inner else package
        for path, doc in _docstrings(obj, seen):
            raw += [f"{path}: {m.group(0)}" for m in SPHINX_ROLE.finditer(doc)]
    assert len(seen) > 200  # the walk reached the members, not just the entries
    advice = "use [`X`][langgraph_effects.X] or `X`"
    assert raw == [], f"Sphinx roles in rendered docstrings ({advice}):\n" + "\n".join(raw)


def test_the_api_reference_covers_what_the_quickstart_imports() -> None:
    rendered = set(_rendered())
    quickstart = (DOCS / "getting-started.md").read_text()
    imported = re.findall(r"^from (langgraph_effects(?:\.\w+)?) import (.+)$", quickstart, flags=re.M)
    assert imported
    for module, names in imported:
        for name in (n.strip() for n in names.split(",")):
            assert f"{module}.{name}" in rendered, f"the quickstart imports {module}.{name}; api.md lacks it"


def test_the_core_page_lists_every_core_module() -> None:
    text = (DOCS / "core.md").read_text()
    listed = set(re.findall(r"^\| `core/(\w+)\.py` \|", text, flags=re.M))
    core = ROOT / "langgraph_effects" / "core"
    modules = {p.stem for p in core.glob("*.py") if not p.stem.startswith("_")}
    assert listed == modules, f"core.md lists {sorted(listed)}, the package has {sorted(modules)}"


def test_the_errors_page_and_the_module_docstring_follow_the_classes() -> None:
    """The errors page is generated from the classes; the tree in ``errors.py``'s own
    docstring (hand-drawn) is checked against them: every class, under its parent."""
    hooks = _hooks()
    rows = hooks.error_classes()  # type: ignore[attr-defined]
    page = (DOCS / "errors.md").read_text()
    assert "<!-- generated: errors -->" in page
    block = hooks.expand("<!-- generated: errors -->")  # type: ignore[attr-defined]
    for depth, cls in rows:
        assert f"{'    ' * depth}- [`{cls.__name__}`]" in block
    defined = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.EffectsError)}
    assert {cls for _, cls in rows} == defined

    drawn: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^    ((?:│   |    )*)(?:├── |└── )(\w+)", line)
        if found:
            drawn.append((len(found.group(1)) // 4 + 1, found.group(2)))
        elif re.match(r"^    (EffectsError)\s*$", line):
            drawn.append((0, "EffectsError"))
    parents: dict[str, str] = {}
    stack: list[str] = []
    for depth, name in drawn:
        del stack[depth:]
        if stack:
            parents[name] = stack[-1]
        stack.append(name)
    actual = {cls.__name__: cls.__mro__[1].__name__ for depth, cls in rows if depth > 0}
    assert parents == actual


def test_the_faq_tells_a_sync_app_which_saver_to_use() -> None:
    """What the FAQ says about ``graph.invoke`` and durable savers is what the savers do:
    each async saver refuses a sync run naming its sync twin (``sync_name``)."""
    from langgraph_effects import AsyncEffectPostgresSaver, AsyncEffectSqliteSaver

    text = (DOCS / "faq.md").read_text()
    entry = text[text.index("**Can I use `graph.invoke` (sync)") :].split("\n\n", 1)[0]
    for saver in (AsyncEffectSqliteSaver, AsyncEffectPostgresSaver):
        assert f"`{saver.sync_name}`" in entry and f"`{saver.__name__}`" in entry
    assert "`SyncMismatchError`" in entry and "sync.md" in entry
    assert "not yet" not in entry.lower() and "planned" not in entry.lower()


@pytest.mark.parametrize("page", ["faq.md", "errors.md", "api.md", "reviews.md", "recovery.md"])
def test_names_the_page_gives_as_ours_exist(page: str) -> None:
    """Every ``Effect*``/``*Error`` name in backticks on the page is one the package has."""
    import langgraph_effects

    known = {*langgraph_effects.__all__, *vars(errors)}
    builtin = set(dir(builtins))
    names = set(re.findall(r"`((?:Sync)?Effect\w*|\w+Error)`", (DOCS / page).read_text()))
    missing = sorted(n for n in names if n not in known and n not in builtin)
    assert missing == [], f"{page} names {missing}, which langgraph_effects does not have"


@pytest.mark.slow
def test_the_site_builds_without_a_warning(tmp_path: Path) -> None:
    """``mkdocs build --strict`` passes and logs no WARNING at all (griffe's and
    autorefs' included): the same check as ``.ci/build-docs``."""
    pytest.importorskip("mkdocs")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    output = done.stdout + done.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert done.returncode == 0 and warnings == [], output[-5000:]
