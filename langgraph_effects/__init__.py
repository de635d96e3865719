"""langgraph-effects: crash-safe side effects for LangGraph agents."""

from .checkpoint import attach_ledger, ledger_of
from .checkpoint.sqlite import EffectSqliteSaver
from .contract import BLIND, Effect, Inconclusive, Landed, LookupRequest, NotLanded
from .errors import (
    ConfigurationError,
    DecisionConflictError,
    DefiniteFailure,
    DurabilityError,
    EffectsError,
    IllegalTransitionError,
    LedgerCorruptError,
    LedgerError,
    LedgerUnavailableError,
    NoLedgerError,
    OperationNotFoundError,
    ReviewError,
    SchemaTooNewError,
    StaleVersionError,
    TransitionError,
)
from .ledger import AuditEntry, InMemoryLedger, Ledger, OperationQuery, SqliteLedger
from .operation import Operation, State

__version__ = "0.1.0"

__all__ = [
    "BLIND",
    "AuditEntry",
    "ConfigurationError",
    "DecisionConflictError",
    "DefiniteFailure",
    "DurabilityError",
    "Effect",
    "EffectSqliteSaver",
    "EffectsError",
    "IllegalTransitionError",
    "Inconclusive",
    "InMemoryLedger",
    "Landed",
    "Ledger",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerUnavailableError",
    "LookupRequest",
    "NoLedgerError",
    "NotLanded",
    "Operation",
    "OperationNotFoundError",
    "OperationQuery",
    "ReviewError",
    "SchemaTooNewError",
    "SqliteLedger",
    "StaleVersionError",
    "State",
    "TransitionError",
    "attach_ledger",
    "ledger_of",
]
