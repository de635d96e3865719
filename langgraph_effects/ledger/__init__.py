"""Ledger backends: where operations and their audit trail are stored."""

from .base import AuditEntry, Ledger, OperationQuery
from .memory import InMemoryLedger
from .sqlite import SqliteLedger

__all__ = ["AuditEntry", "InMemoryLedger", "Ledger", "OperationQuery", "SqliteLedger"]
