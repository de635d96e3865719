"""langgraph-effects: crash-safe side effects for LangGraph agents.

The public API, re-exported here: ``EffectToolNode`` (and ``EffectMiddleware``),
the per-tool contract ``Effect`` with lookup outcomes ``Landed`` / ``NotLanded`` /
``Inconclusive``, ``current_operation()`` (and ``maybe_current_operation()`` for a
tool that also runs unprotected), the ledgers and checkpointer extensions
(``SyncEffectSqliteSaver``/``SyncEffectPostgresSaver`` for ``invoke``/``stream``),
``resume_command`` for answering reviews, and one exception hierarchy rooted at
``EffectsError``. Postgres names import psycopg lazily (the ``postgres`` extra).
"""

from typing import TYPE_CHECKING, Any

from ._integrations.functional import effectful
from ._integrations.node import EffectToolNode
from ._runtime.context import OperationInfo, current_operation, maybe_current_operation
from ._runtime.review import AbandonDecision, LandedDecision, NotLandedDecision, resume_command
from .checkpoint import attach_ledger, ledger_of
from .checkpoint.sqlite import EffectSqliteSaver
from .checkpoint.sync import SyncEffectPostgresSaver, SyncEffectSqliteSaver
from .core.contract import BLIND, Effect, Inconclusive, Landed, LookupRequest, NotLanded
from .core.operation import Operation, State
from .errors import (
    ApprovalError,
    ConfigurationError,
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
from .ledger import AuditEntry, InMemoryLedger, Ledger, OperationQuery, SqliteLedger
from .recovery import OperationReport, RecoveryReport, ThreadReport, recover
from .recovery.sync import recover_sync

if TYPE_CHECKING:
    from ._integrations.middleware import EffectMiddleware
    from .checkpoint.postgres import EffectPostgresSaver
    from .ledger.postgres import PostgresLedger

__version__ = "0.1.0"

__all__ = [
    "BLIND",
    "AuditEntry",
    "ConfigurationError",
    "DecisionConflictError",
    "DefiniteFailure",
    "DurabilityError",
    "Effect",
    "AbandonDecision",
    "ApprovalError",
    "EffectMiddleware",
    "EffectPostgresSaver",
    "EffectSqliteSaver",
    "EffectToolNode",
    "EffectsError",
    "IllegalTransitionError",
    "Inconclusive",
    "InMemoryLedger",
    "Landed",
    "Ledger",
    "LedgerCorruptError",
    "LedgerError",
    "LandedDecision",
    "LedgerUnavailableError",
    "LookupRequest",
    "MissingExtraError",
    "NoLedgerError",
    "NotLanded",
    "NotLandedDecision",
    "Operation",
    "OperationInfo",
    "OperationNotFoundError",
    "OperationQuery",
    "PostgresLedger",
    "ReviewError",
    "NondeterminismError",
    "ThreadConflictError",
    "SchemaTooNewError",
    "SqliteLedger",
    "StaleVersionError",
    "State",
    "SyncEffectPostgresSaver",
    "SyncEffectSqliteSaver",
    "SyncMismatchError",
    "TransitionError",
    "LeaseLiveError",
    "LedgerNotFoundError",
    "NotResolvableError",
    "VerdictNotRecordedError",
    "OperationReport",
    "RecoveryReport",
    "ThreadReport",
    "attach_ledger",
    "current_operation",
    "effectful",
    "ledger_of",
    "maybe_current_operation",
    "recover",
    "recover_sync",
    "resume_command",
]


def __getattr__(name: str) -> Any:
    # Optional extras import on first use: psycopg (postgres), langchain (agents).
    if name == "EffectMiddleware":
        from ._integrations.middleware import EffectMiddleware  # without langchain: MissingExtraError

        return EffectMiddleware
    if name == "PostgresLedger":
        from .ledger.postgres import PostgresLedger

        return PostgresLedger
    if name == "EffectPostgresSaver":
        from .checkpoint.postgres import EffectPostgresSaver

        return EffectPostgresSaver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
