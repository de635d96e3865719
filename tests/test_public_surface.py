"""The public surface is small, documented and pinned: the root's ``__all__`` is this
list, every name resolves (lazily) to the object of the module that defines it, the
pure core's public names have docstrings, and the package's top-level modules are
exactly the documented ones (anything else is private: ``_name``)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import typing
from pathlib import Path

import pytest

import langgraph_effects

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "langgraph_effects"

PUBLIC = [
    "AbandonVerdict",
    "ApprovalError",
    "AsyncEffectPostgresSaver",
    "AsyncEffectSqliteSaver",
    "AuditEntry",
    "BLIND",
    "Budget",
    "BudgetExceededError",
    "CircuitBreaker",
    "CircuitOpenError",
    "CompensationError",
    "CompensationReport",
    "ConfigurationError",
    "ControlRefusedError",
    "DecisionConflictError",
    "DefiniteFailure",
    "DurabilityError",
    "Effect",
    "EffectKeyInterceptor",
    "EffectMiddleware",
    "EffectPostgresSaver",
    "EffectSqliteSaver",
    "EffectToolNode",
    "EffectsError",
    "IllegalTransitionError",
    "InMemoryLedger",
    "Inconclusive",
    "Landed",
    "LandedVerdict",
    "LeaseLiveError",
    "Ledger",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerNotFoundError",
    "LedgerUnavailableError",
    "LookupRequest",
    "MissingExtraError",
    "NoLedgerError",
    "NondeterminismError",
    "NotLanded",
    "NotLandedVerdict",
    "NotResolvableError",
    "Operation",
    "OperationInfo",
    "OperationNotFoundError",
    "OperationQuery",
    "OperationReport",
    "PostgresLedger",
    "RecoveryReport",
    "ReviewError",
    "SchemaTooNewError",
    "SqliteLedger",
    "StaleVersionError",
    "State",
    "SyncMismatchError",
    "ThreadConflictError",
    "ThreadReport",
    "TransitionError",
    "Undo",
    "UndoRequest",
    "VerdictNotRecordedError",
    "attach_ledger",
    "compensate",
    "current_operation",
    "effectful",
    "finish_compensations",
    "hide_key_arguments",
    "ledger_of",
    "maybe_current_operation",
    "mcp_lookup",
    "recover",
    "recover_sync",
    "require_contracts",
    "resume_command",
]

#: The package's top-level modules and packages: public (each has a row in docs/core.md) ...
PUBLIC_MODULES = {
    "core", "errors", "ledger", "checkpoint", "recovery", "operator", "cli", "crashtest", "lab", "testing",
}
#: ... and private (free to change between releases).
PRIVATE_MODULES = {"_runtime", "_integrations", "_private"}


def test_the_root_exports_exactly_the_pinned_list() -> None:
    assert sorted(PUBLIC) == PUBLIC, "keep the pinned list sorted"
    assert langgraph_effects.__all__ == PUBLIC, "a change of the public API: update this list and docs/api.md"
    assert isinstance(langgraph_effects.__version__, str)


@pytest.mark.parametrize("name", PUBLIC)
def test_each_name_resolves_to_the_object_where_it_is_defined(name: str) -> None:
    value = getattr(langgraph_effects, name)
    home = langgraph_effects._EXPORTS[name]
    assert getattr(importlib.import_module(f"langgraph_effects.{home}"), name) is value
    assert name in dir(langgraph_effects)
    documented = value.__doc__ if callable(value) else type(value).__doc__
    assert (documented or "").strip(), f"{name} has no docstring"


PRIVATE_HOMES = [n for n in PUBLIC if langgraph_effects._EXPORTS[n].startswith("_")]


@pytest.mark.parametrize("name", PRIVATE_HOMES)
def test_a_name_from_a_private_module_reports_the_package_as_its_module(name: str) -> None:
    value = getattr(langgraph_effects, name)
    assert value.__module__ == "langgraph_effects", f"{name} reports {value.__module__}"
    assert getattr(langgraph_effects, value.__qualname__) is value  # what pickle looks up
    if isinstance(value, type) and name != "EffectMiddleware":  # its langchain base: a TYPE_CHECKING name
        typing.get_type_hints(value)  # its annotations still resolve (NameError if not)


def test_names_defined_in_public_modules_keep_their_module() -> None:
    assert "_integrations.node" in langgraph_effects._EXPORTS.values() and len(PRIVATE_HOMES) > 10
    assert langgraph_effects.ReviewError.__module__ == "langgraph_effects.errors"
    assert langgraph_effects.Effect.__module__ == "langgraph_effects.core.contract"


def test_exported_objects_and_errors_unpickle_in_a_fresh_process() -> None:
    """What one process pickles (a verdict, a class, a function, an error) another one,
    which has imported nothing yet, reads back: the names ``__module__`` gives resolve."""
    import base64
    import pickle
    import subprocess
    import sys

    from langgraph_effects import LandedVerdict, ReviewError, resume_command

    payload = base64.b64encode(
        pickle.dumps(
            [LandedVerdict(receipt={"id": "r1"}), langgraph_effects.EffectToolNode, resume_command,
             ReviewError("not a valid verdict")]
        )
    ).decode()
    script = (
        "import base64, pickle, sys\n"
        "verdict, node, function, error = pickle.loads(base64.b64decode(sys.argv[1]))\n"
        "print(verdict.receipt['id'], node.__name__, function.__name__, type(error).__name__, error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, payload], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split(maxsplit=4)
    assert out == ["r1", "EffectToolNode", "resume_command", "ReviewError", "not a valid verdict\n"]


def test_star_import_and_unknown_names() -> None:
    namespace: dict[str, object] = {}
    exec("from langgraph_effects import *", namespace)
    assert set(PUBLIC) <= set(namespace)
    with pytest.raises(AttributeError, match="has no attribute 'Session'"):
        langgraph_effects.Session  # noqa: B018  # the runtime's names are not exported
    with pytest.raises(ImportError):
        exec("from langgraph_effects import Outcome", {})


def _undocumented(path: Path) -> list[str]:
    """Public names of a module with no docstring: functions, classes and their public
    methods (a docstring), constants and aliases (a ``#:`` comment above, or a string below)."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    missing = [] if ast.get_docstring(tree) else ["(module)"]
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name.startswith("_"):
                continue
            if not ast.get_docstring(node):
                missing.append(node.name)
            if isinstance(node, ast.ClassDef):
                missing += [
                    f"{node.name}.{member.name}"
                    for member in node.body
                    if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
                    and not member.name.startswith("_")
                    and not ast.get_docstring(member)
                ]
            continue
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        after = tree.body[index + 1] if index + 1 < len(tree.body) else None
        string_below = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        comment_above = node.lineno > 1 and lines[node.lineno - 2].lstrip().startswith("#:")
        missing += [n for n in names if not n.startswith("_") and not (string_below or comment_above)]
    return missing


@pytest.mark.parametrize(
    "path",
    [
        *sorted((PACKAGE / "core").glob("*.py")),
        PACKAGE / "operator.py",
        PACKAGE / "_runtime" / "operator.py",
        PACKAGE / "_runtime" / "shapes.py",
    ],
    ids=lambda p: p.relative_to(PACKAGE).as_posix(),
)
def test_the_core_and_operator_public_names_are_documented(path: Path) -> None:
    where = path.relative_to(PACKAGE).as_posix()
    assert not _undocumented(path), f"add docstrings in {where}: {_undocumented(path)}"


def test_the_docstring_check_finds_what_is_missing(tmp_path: Path) -> None:
    # Guards the test above against passing vacuously.
    module = tmp_path / "m.py"
    module.write_text(
        '"""A module."""\n\nX = 1\n#: documented\nY = 2\nZ = 3\n"""documented"""\n\n'
        "def f() -> None:\n    pass\n\n\nclass C:\n    def m(self) -> None:\n        pass\n"
    )
    assert _undocumented(module) == ["X", "f", "C", "C.m"]


def test_the_top_level_modules_are_the_documented_set() -> None:
    found = {m.name for m in pkgutil.iter_modules([str(PACKAGE)])}
    assert {n for n in found if not n.startswith("_")} == PUBLIC_MODULES
    assert {n for n in found if n.startswith("_")} == PRIVATE_MODULES
    page = (ROOT / "docs" / "core.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \|", page, flags=re.M))
    assert listed == PUBLIC_MODULES, "docs/core.md's layout table lists the public modules"


def test_the_operator_api_lists_each_name_once_and_each_resolves() -> None:
    """``langgraph_effects.operator`` names its public names twice: in ``__all__`` (what
    type checkers read as exported) and in the lazy map saying where each lives. They
    must agree, and each name must import from the home the map gives."""
    from langgraph_effects import operator

    assert sorted(operator.__all__) == sorted(operator._EXPORTS)
    assert len(set(operator.__all__)) == len(operator.__all__)
    for name in operator.__all__:
        assert getattr(operator, name) is not None, name
