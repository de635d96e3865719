"""The operator API: list, show, resolve, compensate and recover operations from Python,
read the ledger's health (``stats``; as OpenTelemetry gauges, ``observe_ledger``), and
purge, erase and delete operations when their time is over (docs/lifecycle.md).

Everything the console (``langgraph-effects list/show/resolve/compensate/recover/stats``) does,
it does through these functions, so a service, a notebook or a script gets the same
behaviour and the same JSON:

    from langgraph_effects.operator import list_operations, open_ledger, resolve, show

    async with open_ledger("agent.sqlite") as ledger:
        for op in await list_operations(ledger):  # unresolved ones, oldest change first
            view = await show(ledger, op.op_id)
            print(view.to_json())  # what `show --json` prints
        await resolve(
            ledger, op.op_id, {"type": "landed", "receipt": {"id": "r1"}},
            expected_version=view.operation.version, actor="alice",
        )

A verdict is bound to the version the operator saw (``expected_version``): if the
operation moved since, it is refused and nothing changes; it is idempotent by its
decision id; the graph honours it on its next resume exactly as if it had been given
through ``Command(resume=...)``.

**JSON.** Every ``to_json()`` here, the console's ``--json`` output, the values of the
``interrupt()`` the package raises and the recovery report share one vocabulary (an
operation's id is ``operation_id`` everywhere). Their shapes are the typed dicts
below (``OperationJSON``, ``OperationViewJSON``, ``ReviewRequestJSON``...); their JSON
Schemas come from [`json_schemas`][langgraph_effects.operator.json_schemas] and are
published on the docs' "JSON shapes" page.

Every name imports on first use (PEP 562): ``recover`` loads LangGraph, the rest does
not.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._runtime.compensation import (
        compensate,
        compensations,
        compensations_to_json,
        finish_compensations,
    )
    from ._runtime.gauges import LedgerGauges, observe_ledger
    from ._runtime.lifecycle import (
        Deletion,
        ErasureReport,
        PurgeReport,
        delete_thread_operations,
        erase,
        forced_deletions,
        purge,
    )
    from ._runtime.operator import (
        VERDICTS,
        LeaseStatus,
        OperationView,
        VerdictReport,
        allowed_verdicts,
        audit_to_json,
        lease_status,
        list_operations,
        new_decision_id,
        operation_to_json,
        operations_to_json,
        resolve,
        resolve_report,
        show,
    )
    from ._runtime.shapes import (
        SHAPES,
        ActionRequestJSON,
        AlertJSON,
        ApprovalEntryJSON,
        ApprovalRequestJSON,
        AuditEntryJSON,
        BudgetJSON,
        CircuitJSON,
        CompensationEntryJSON,
        CompensationJSON,
        CompensationListJSON,
        DeletedOperationJSON,
        DeletionJSON,
        DeletionListJSON,
        ErasureReportJSON,
        ErrorDetailJSON,
        ErrorJSON,
        OperationJSON,
        OperationListJSON,
        OperationReportJSON,
        OperationViewJSON,
        OwnerJSON,
        PurgeReportJSON,
        RecoveryReportJSON,
        ResultSummaryJSON,
        ReviewConfigJSON,
        ReviewEntryJSON,
        ReviewRequestJSON,
        StateAtJSON,
        StateCountJSON,
        StatsJSON,
        StatsOperationJSON,
        ThreadReportJSON,
        TransitionJSON,
        VerdictReportJSON,
        WaitingJSON,
        WaitingListJSON,
        json_schema,
        json_schemas,
    )
    from ._runtime.stats import PENDING_SCAN, LedgerStats, stats
    from ._runtime.undo import CompensationReport
    from .ledger.registry import DEFAULT_CONNECT_TIMEOUT, has_password, open_ledger, setup_database
    from .recovery import OperationReport, RecoveryReport, ThreadReport, recover
    from .recovery.sync import recover_sync

__all__ = [
    "ActionRequestJSON",
    "AlertJSON",
    "ApprovalEntryJSON",
    "ApprovalRequestJSON",
    "AuditEntryJSON",
    "BudgetJSON",
    "CircuitJSON",
    "CompensationEntryJSON",
    "CompensationJSON",
    "CompensationListJSON",
    "CompensationReport",
    "VERDICTS",
    "DEFAULT_CONNECT_TIMEOUT",
    "DeletedOperationJSON",
    "Deletion",
    "DeletionJSON",
    "DeletionListJSON",
    "ErasureReport",
    "ErasureReportJSON",
    "ErrorDetailJSON",
    "ErrorJSON",
    "LeaseStatus",
    "LedgerGauges",
    "LedgerStats",
    "OperationJSON",
    "OperationListJSON",
    "OperationReport",
    "OperationReportJSON",
    "OperationView",
    "OperationViewJSON",
    "OwnerJSON",
    "PENDING_SCAN",
    "PurgeReport",
    "PurgeReportJSON",
    "RecoveryReport",
    "RecoveryReportJSON",
    "VerdictReport",
    "VerdictReportJSON",
    "ResultSummaryJSON",
    "ReviewConfigJSON",
    "ReviewEntryJSON",
    "ReviewRequestJSON",
    "SHAPES",
    "StateAtJSON",
    "StateCountJSON",
    "StatsJSON",
    "StatsOperationJSON",
    "ThreadReport",
    "ThreadReportJSON",
    "TransitionJSON",
    "WaitingJSON",
    "WaitingListJSON",
    "allowed_verdicts",
    "audit_to_json",
    "compensate",
    "compensations",
    "compensations_to_json",
    "delete_thread_operations",
    "erase",
    "finish_compensations",
    "forced_deletions",
    "has_password",
    "json_schema",
    "json_schemas",
    "lease_status",
    "list_operations",
    "new_decision_id",
    "observe_ledger",
    "open_ledger",
    "operation_to_json",
    "operations_to_json",
    "purge",
    "recover",
    "recover_sync",
    "resolve",
    "resolve_report",
    "setup_database",
    "show",
    "stats",
]

#: Where each name lives (relative to the package); imported on first access.
_EXPORTS: dict[str, str] = {
    # reading
    "open_ledger": "ledger.registry",
    "setup_database": "ledger.registry",
    "DEFAULT_CONNECT_TIMEOUT": "ledger.registry",
    "has_password": "ledger.registry",
    "list_operations": "_runtime.operator",
    "show": "_runtime.operator",
    "OperationView": "_runtime.operator",
    "lease_status": "_runtime.operator",
    "LeaseStatus": "_runtime.operator",
    "allowed_verdicts": "_runtime.operator",
    # resolving
    "resolve": "_runtime.operator",
    "resolve_report": "_runtime.operator",
    "VerdictReport": "_runtime.operator",
    "new_decision_id": "_runtime.operator",
    "VERDICTS": "_runtime.operator",
    # compensating
    "compensate": "_runtime.compensation",
    "compensations": "_runtime.compensation",
    "finish_compensations": "_runtime.compensation",
    "CompensationReport": "_runtime.undo",
    # health
    "stats": "_runtime.stats",
    "LedgerStats": "_runtime.stats",
    "PENDING_SCAN": "_runtime.stats",
    "observe_ledger": "_runtime.gauges",
    "LedgerGauges": "_runtime.gauges",
    # keeping the ledger for years
    "purge": "_runtime.lifecycle",
    "PurgeReport": "_runtime.lifecycle",
    "erase": "_runtime.lifecycle",
    "ErasureReport": "_runtime.lifecycle",
    "delete_thread_operations": "_runtime.lifecycle",
    "forced_deletions": "_runtime.lifecycle",
    "Deletion": "_runtime.lifecycle",
    # recovering
    "recover": "recovery",
    "recover_sync": "recovery.sync",
    "RecoveryReport": "recovery",
    "ThreadReport": "recovery",
    "OperationReport": "recovery",
    # JSON
    "operation_to_json": "_runtime.operator",
    "operations_to_json": "_runtime.operator",
    "audit_to_json": "_runtime.operator",
    "compensations_to_json": "_runtime.compensation",
    "json_schema": "_runtime.shapes",
    "json_schemas": "_runtime.shapes",
    "SHAPES": "_runtime.shapes",
    # the JSON shapes' typed dicts: every name of __all__ that ends in JSON
    **{name: "_runtime.shapes" for name in __all__ if name.endswith("JSON")},
}


def __getattr__(name: str) -> _typing.Any:
    """Import a name on first access and keep it (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __package__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (imported or not yet) beside what the module holds."""
    return sorted({*globals(), *__all__})
