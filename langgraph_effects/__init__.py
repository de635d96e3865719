"""langgraph-effects: crash-safe side effects for LangGraph agents.

The public API, re-exported here: ``EffectToolNode`` (and ``EffectMiddleware``),
the per-tool contract ``Effect`` with lookup outcomes ``Landed`` / ``NotLanded`` /
``Inconclusive``, ``current_operation()`` (and ``maybe_current_operation()`` for a
tool that also runs unprotected), the ledgers and checkpointer extensions,
``resume_command`` for answering reviews, and one exception hierarchy rooted at
``EffectsError``.

Every name imports on first use (PEP 562), so ``import langgraph_effects`` loads
no LangGraph, LangChain, pydantic or database driver; ``from langgraph_effects
import EffectToolNode`` loads what that name needs and nothing else. The pure
core (`langgraph_effects.core`) imports without any of them. Optional extras
import when their names are first used: ``PostgresLedger`` / ``AsyncEffectPostgresSaver``
need psycopg (the ``postgres`` extra), ``EffectMiddleware`` needs langchain,
the MCP names (``EffectKeyInterceptor``, ``mcp_lookup``, ``hide_key_arguments``,
``require_contracts``) need
langchain-mcp-adapters (the ``mcp`` extra).
"""

import importlib as _importlib
import sys as _sys
import types as _types
import typing as _typing

from ._runtime import processes as _processes

if _typing.TYPE_CHECKING:
    from ._integrations.functional import effectful
    from ._integrations.mcp import EffectKeyInterceptor, hide_key_arguments, mcp_lookup, require_contracts
    from ._integrations.middleware import EffectMiddleware
    from ._integrations.node import EffectToolNode
    from ._runtime.compensation import compensate, finish_compensations
    from ._runtime.context import OperationInfo, current_operation, maybe_current_operation
    from ._runtime.decisions import (
        AbandonVerdict,
        LandedVerdict,
        NotLandedVerdict,
        resume_command,
    )
    from ._runtime.undo import CompensationReport
    from .checkpoint.postgres import AsyncEffectPostgresSaver
    from .checkpoint.sqlite import AsyncEffectSqliteSaver
    from .checkpoint.sync import EffectPostgresSaver, EffectSqliteSaver
    from .core.contract import (
        BLIND,
        Effect,
        Inconclusive,
        Landed,
        LookupRequest,
        NotLanded,
        Undo,
        UndoRequest,
    )
    from .core.controls import Budget, CircuitBreaker
    from .core.operation import Operation, State
    from .errors import (
        ApprovalError,
        BudgetExceededError,
        CircuitOpenError,
        CompensationError,
        ConfigurationError,
        ControlRefusedError,
        DecisionConflictError,
        DefiniteFailure,
        DurabilityError,
        EffectsError,
        IllegalTransitionError,
        LeaseLiveError,
        LedgerCorruptError,
        LedgerError,
        LedgerNotFoundError,
        LedgerUnavailableError,
        MissingExtraError,
        NoLedgerError,
        NondeterminismError,
        NotResolvableError,
        OperationNotFoundError,
        ReviewError,
        SchemaTooNewError,
        StaleVersionError,
        SyncMismatchError,
        ThreadConflictError,
        TransitionError,
        VerdictNotRecordedError,
    )
    from .ledger import (
        AuditEntry,
        InMemoryLedger,
        Ledger,
        OperationQuery,
        SqliteLedger,
    )
    from .ledger.attach import attach_ledger, ledger_of
    from .ledger.postgres import PostgresLedger
    from .recovery import (
        OperationReport,
        RecoveryReport,
        ThreadReport,
        recover,
    )
    from .recovery.sync import recover_sync

__version__ = "0.1.0"

__all__ = [
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

#: Where each public name lives (relative to this package); imported on first access.
_EXPORTS: dict[str, str] = {
    "AbandonVerdict": "_runtime.decisions",
    "ApprovalError": "errors",
    "AuditEntry": "ledger",
    "BLIND": "core.contract",
    "Budget": "core.controls",
    "BudgetExceededError": "errors",
    "CircuitBreaker": "core.controls",
    "CircuitOpenError": "errors",
    "ControlRefusedError": "errors",
    "CompensationError": "errors",
    "CompensationReport": "_runtime.undo",
    "ConfigurationError": "errors",
    "DecisionConflictError": "errors",
    "DefiniteFailure": "errors",
    "DurabilityError": "errors",
    "Effect": "core.contract",
    "EffectKeyInterceptor": "_integrations.mcp",
    "EffectMiddleware": "_integrations.middleware",
    "AsyncEffectPostgresSaver": "checkpoint.postgres",
    "AsyncEffectSqliteSaver": "checkpoint.sqlite",
    "EffectToolNode": "_integrations.node",
    "EffectsError": "errors",
    "IllegalTransitionError": "errors",
    "InMemoryLedger": "ledger",
    "Inconclusive": "core.contract",
    "Landed": "core.contract",
    "LandedVerdict": "_runtime.decisions",
    "LeaseLiveError": "errors",
    "Ledger": "ledger",
    "LedgerCorruptError": "errors",
    "LedgerError": "errors",
    "LedgerNotFoundError": "errors",
    "LedgerUnavailableError": "errors",
    "LookupRequest": "core.contract",
    "MissingExtraError": "errors",
    "NoLedgerError": "errors",
    "NondeterminismError": "errors",
    "NotLanded": "core.contract",
    "NotLandedVerdict": "_runtime.decisions",
    "NotResolvableError": "errors",
    "Operation": "core.operation",
    "OperationInfo": "_runtime.context",
    "OperationNotFoundError": "errors",
    "OperationQuery": "ledger",
    "OperationReport": "recovery",
    "PostgresLedger": "ledger.postgres",
    "RecoveryReport": "recovery",
    "ReviewError": "errors",
    "SchemaTooNewError": "errors",
    "SqliteLedger": "ledger",
    "StaleVersionError": "errors",
    "State": "core.operation",
    "EffectPostgresSaver": "checkpoint.sync",
    "EffectSqliteSaver": "checkpoint.sync",
    "SyncMismatchError": "errors",
    "ThreadConflictError": "errors",
    "ThreadReport": "recovery",
    "TransitionError": "errors",
    "Undo": "core.contract",
    "UndoRequest": "core.contract",
    "VerdictNotRecordedError": "errors",
    "attach_ledger": "ledger.attach",
    "compensate": "_runtime.compensation",
    "current_operation": "_runtime.context",
    "effectful": "_integrations.functional",
    "finish_compensations": "_runtime.compensation",
    "hide_key_arguments": "_integrations.mcp",
    "ledger_of": "ledger.attach",
    "maybe_current_operation": "_runtime.context",
    "mcp_lookup": "_integrations.mcp",
    "recover": "recovery",
    "recover_sync": "recovery.sync",
    "require_contracts": "_integrations.mcp",
    "resume_command": "_runtime.decisions",
}

# Every process that imports the package appends itself to the lineage its children
# inherit (see ``_runtime/processes.py``); the lease module did this at import when the
# root imported everything eagerly. Stdlib only, and idempotent.
_processes.mark_lineage()


def __getattr__(name: str) -> _typing.Any:
    """Import a public name on first access and keep it (PEP 562).

    A class or function whose home is a private module (``_runtime``, ``_integrations``)
    reports this package as its ``__module__``, the place users import it from: reprs,
    tracebacks and pickles name ``langgraph_effects.X``, which resolves to it here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    if any(part.startswith("_") for part in module.split(".")) and (
        isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__"))
    ):
        _adopt(value)
    globals()[name] = value
    return value


def _adopt(value: _typing.Any) -> None:
    """Make ``value`` report this package as its ``__module__``. A class's own string
    annotations are resolved first, in the module that defines it: ``get_type_hints``
    reads them in the module ``__module__`` names, which does not hold their names."""
    import contextlib
    import inspect

    own = inspect.get_annotations(value) if isinstance(value, type) else {}
    if any(isinstance(hint, str) for hint in own.values()):
        home = vars(_sys.modules[value.__module__])
        holder = _types.SimpleNamespace(__annotations__=own)
        with contextlib.suppress(Exception):  # a name only TYPE_CHECKING imports: unresolvable anyway
            value.__annotations__ = {
                **own, **_typing.get_type_hints(holder, home, dict(vars(value)), include_extras=True)
            }
    value.__module__ = __name__


def __dir__() -> list[str]:
    """The public names (imported or not yet) beside what the module holds."""
    return sorted({*globals(), *__all__})
