"""The JSON the operator surface prints and hands out, as typed dicts.

One shape per thing, one name per field: the console's ``--json`` output, the values
of the ``interrupt()`` the package raises, and the recovery report are built as these
types (mypy checks every producer against them), and ``docs/json.md`` publishes the
JSON Schema generated from them (``json_schemas``), which ``tests/test_json_shapes.py``
validates real outputs against. An operation's id is ``operation_id`` everywhere.

Standard library only; pydantic is imported when a schema is generated.
"""

from __future__ import annotations

from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict

StateName = Literal["pending", "dispatched", "unknown", "review", "confirmed", "failed", "abandoned"]
"""An operation's state (``State``'s values)."""

Verdict = Literal["landed", "not_landed", "abandon"]
"""A verdict an operator may give (``VERDICTS``)."""

LeaseName = Literal["live", "expired", "owner_dead"]
"""A ``dispatched`` operation's lease (``LeaseStatus``)."""


class OwnerJSON(TypedDict):
    """Who holds (or held) a dispatch lease."""

    host: str
    pid: int
    started: float
    token: str
    lock: NotRequired[str]
    since: NotRequired[float]
    node: NotRequired[str]


class ResultSummaryJSON(TypedDict):
    """The stored tool result, summarised: it is never printed whole."""

    type: str | None
    bytes: int
    sha256: str


class OperationJSON(TypedDict):
    """One operation as the ledger stores it (arguments redacted)."""

    operation_id: str
    state: StateName
    version: int
    terminal: bool
    lease: LeaseName | None
    allowed_verdicts: list[Verdict]
    tool: str
    contract: str
    thread_id: str
    checkpoint_ns: str
    tenant: str
    policy_version: str | None
    tool_call_id: str
    message_id: str | None
    task_id: str | None
    checkpoint_id: str | None
    args: dict[str, Any]
    args_hash: str
    provider_key: str
    attempts: int
    owner: OwnerJSON | None
    lease_expires_at: float | None
    dispatched_at: float | None
    result: ResultSummaryJSON | None
    evidence: dict[str, Any] | None
    decision_ids: list[str]
    extra: dict[str, Any]
    compensates: str | None
    compensated_by: str | None
    created_at: float
    updated_at: float


class AuditEntryJSON(TypedDict):
    """One transition of one operation, from its audit trail."""

    operation_id: str
    seq: int
    at: float
    actor: str
    from_state: StateName | None
    to_state: StateName
    event: str
    version: int
    evidence: dict[str, Any] | None


class OperationListJSON(TypedDict):
    """``langgraph-effects list --json``: operations, least recently changed first."""

    count: int
    limit: int
    truncated: bool
    next: str | None
    """The cursor of the next page (``list --after NEXT``), or ``None`` on the last."""
    operations: list[OperationJSON]


class OperationViewJSON(TypedDict):
    """``langgraph-effects show --json``: one operation, its lease, the verdicts it
    takes now, its audit trail, and the audit entries that note a late send by an
    overtaken owner (a second request may have reached the provider)."""

    operation: OperationJSON
    lease: LeaseName | None
    allowed_verdicts: list[Verdict]
    audit: list[AuditEntryJSON]
    late_sends: list[AuditEntryJSON]


class VerdictReportJSON(TypedDict):
    """``langgraph-effects resolve --json``: what recording a verdict did."""

    operation: OperationJSON
    decision_id: str
    verdict: dict[str, Any]
    from_state: StateName
    replayed: bool
    lease_lost: bool


class PurgeReportJSON(TypedDict):
    """``langgraph-effects purge --json``: what a purge removed (or, in a dry run, would
    remove), and what it kept past the window and why (counts)."""

    older_than_seconds: float
    cutoff: float
    dry_run: bool
    removed: int
    kept_in_dedup_window: int
    kept_undo_pending: int
    batches: int


class ErasureReportJSON(TypedDict):
    """``langgraph-effects erase --json``: the operations whose data was erased (or, in
    a dry run, would be), those erased before, and the unresolved ones left as they are."""

    tenant: str | None
    thread_id: str | None
    actor: str
    dry_run: bool
    erased: list[str]
    already_erased: list[str]
    unresolved: list[str]


class DeletedOperationJSON(TypedDict):
    """An operation that was unresolved when its thread was deleted by force, as it was."""

    operation_id: str
    state: str
    tool: str
    provider_key: str
    tenant: str
    updated_at: float


class DeletionJSON(TypedDict):
    """A thread deleted by force while some of its operations were unresolved: who
    decided (``actor``), when (``at``, epoch seconds) and those operations."""

    thread_id: str
    at: float
    actor: str
    operations: list[DeletedOperationJSON]


class DeletionListJSON(TypedDict):
    """``langgraph-effects deletions --json``: the forced thread deletions, oldest first."""

    deletions: list[DeletionJSON]


class CompensationJSON(TypedDict):
    """How one compensation stands: the effect, its undo, and why
    (``langgraph-effects compensate --json``, and each of a recovery's compensations)."""

    operation: OperationJSON
    undo: OperationJSON | None
    verdict: str
    reason: str
    compensation: str
    error: str | None


class CompensationEntryJSON(TypedDict):
    """One undo and the effect it undoes (``None``: not in the ledger any more)."""

    operation: OperationJSON | None
    undo: OperationJSON
    compensation: str


class CompensationListJSON(TypedDict):
    """``langgraph-effects compensations --json``."""

    compensations: list[CompensationEntryJSON]


class TransitionJSON(TypedDict):
    """One transition a recovery's resume recorded."""

    event: str
    from_state: StateName | None
    to_state: StateName
    version: int
    evidence: dict[str, Any] | None
    actor: str
    at: float


class StateAtJSON(TypedDict):
    """An operation's state at one moment of a recovery (before or after the resume)."""

    state: StateName
    version: int
    attempts: int
    evidence: str | None
    """The evidence's kind (as a ToolMessage artifact names it), not the evidence."""


class OperationReportJSON(TypedDict):
    """One operation of a thread a recovery looked at."""

    operation_id: str
    tool: str
    tool_call_id: str
    contract: str
    provider_key: str
    new: bool
    before: StateAtJSON | None
    after: StateAtJSON
    how: str
    detail: str
    transitions: list[TransitionJSON]


class ThreadReportJSON(TypedDict):
    """What a recovery did with one thread."""

    thread_id: str
    tenant: str
    action: str
    reason: str
    outcome: Literal["completed", "interrupted", "stopped", "error"] | None
    error: str | None
    interrupts: list[str]
    awaiting_review: list[str]
    seconds: float
    operations: list[OperationReportJSON]


class RecoveryReportJSON(TypedDict):
    """``langgraph-effects recover --json`` and ``RecoveryReport.to_json()``."""

    ledger: str
    dry_run: bool
    started_at: float
    finished_at: float
    options: dict[str, Any]
    nothing_to_do: bool
    counts: dict[str, int]
    awaiting_review: list[str]
    threads: list[ThreadReportJSON]
    compensations: list[CompensationJSON]


class ActionRequestJSON(TypedDict):
    """One entry of LangChain's HITL ``action_requests`` (Agent Inbox, Studio)."""

    name: str
    args: dict[str, Any]
    description: str


class ReviewConfigJSON(TypedDict):
    """One entry of LangChain's HITL ``review_configs``."""

    action_name: str
    allowed_decisions: list[str]


class ReviewEntryJSON(TypedDict):
    """One operation of an ``effect_review`` interrupt, as an operator decides on it."""

    operation_id: str
    tool: str
    tool_call_id: str
    args: dict[str, Any]
    args_hash: str
    provider_key: str
    contract: str
    state: StateName
    version: int
    attempts: int
    evidence: dict[str, Any]
    thread_id: str
    tenant: str
    policy_version: str | None
    allowed_verdicts: list[Verdict]


class ReviewRequestJSON(TypedDict):
    """The value of an ``effect_review`` interrupt: operations whose outcome only a
    human can settle. Answer it with ``resume_command`` (by ``operation_id``)."""

    type: Literal["effect_review"]
    action_requests: list[ActionRequestJSON]
    review_configs: list[ReviewConfigJSON]
    operations: list[ReviewEntryJSON]
    round: int
    """The node's n-th question in this task: with ``operations`` (ids and versions, in
    order) it names the question an answer is bound to."""
    refused_answer: NotRequired[str]


class ApprovalEntryJSON(TypedDict):
    """One gated call of an ``effect_approval`` interrupt."""

    operation_id: str
    tool_call_id: str
    args_hash: str
    version: int


class ApprovalRequestJSON(TypedDict):
    """The value of an ``effect_approval`` interrupt: calls waiting for an approval
    before their first send."""

    type: Literal["effect_approval"]
    action_requests: list[ActionRequestJSON]
    review_configs: list[ReviewConfigJSON]
    operations: list[ApprovalEntryJSON]
    round: int
    """The node's n-th question in this task: with ``operations`` (ids and versions, in
    order) it names the question an answer is bound to."""
    refused_answer: NotRequired[str]


class StateCountJSON(TypedDict):
    """How many operations are in one state for one tool."""

    state: StateName
    tool: str
    count: int
    least_recent_update: float
    """The ``updated_at`` of the least recently changed of them."""


class StatsOperationJSON(TypedDict):
    """An operation as ``stats`` names it: where it is and how long it has been there."""

    operation_id: str
    state: StateName
    tool: str
    thread_id: str
    tenant: str
    version: int
    updated_at: float
    age: float
    """Seconds since it last changed."""


class WaitingJSON(StatsOperationJSON):
    """An operation waiting for a human: a verdict (``review``) or an approval."""

    waits_for: Literal["review", "approval"]


class WaitingListJSON(TypedDict):
    """Operations waiting for a human, least recently changed first."""

    count: int
    """Every operation in ``review``, plus the approvals found (see ``complete``)."""
    oldest_age: float | None
    operations: list[WaitingJSON]
    """At most ``limit`` of them."""
    complete: bool
    """``False``: more operations are pending than were looked at for approvals."""


class BudgetJSON(TypedDict):
    """One budget's use in one scope, and what is left of its limits."""

    name: str
    scope: list[Any] | str
    """(tenant, thread or run, window start), as charged."""
    sends: int
    sends_left: int | None
    total: float
    total_left: float | None
    updated_at: float


class CircuitJSON(TypedDict):
    """One circuit breaker."""

    name: str
    status: Literal["closed", "open", "half-open", "probing"]
    failures: int
    threshold: int | None
    opened_at: float | None
    updated_at: float


class AlertJSON(TypedDict):
    """A threshold ``stats`` was given that the ledger is over."""

    kind: Literal["review_age", "unresolved_age"]
    operation_id: str
    age: float
    limit: float
    message: str


class StatsJSON(TypedDict):
    """``langgraph-effects stats --json`` and ``LedgerStats.to_json()``: unresolved
    operations by state and tool, who waits for a human and for how long, budgets and
    circuits, and the thresholds crossed."""

    ledger: str
    tenant: str | None
    at: float
    unresolved: int
    by_state: dict[str, int]
    """Every state counted: the unresolved ones, and the settled ones with ``settled``."""
    counts: list[StateCountJSON]
    settled: bool
    """Whether settled states (``confirmed``, ``failed``, ``abandoned``) were counted."""
    oldest_unresolved: StatsOperationJSON | None
    waiting: WaitingListJSON
    budgets: list[BudgetJSON]
    circuits: list[CircuitJSON]
    max_review_age: float | None
    max_unresolved_age: float | None
    alerts: list[AlertJSON]


class ErrorDetailJSON(TypedDict):
    """What went wrong, for a program: ``kind`` is stable, ``message`` is for people."""

    kind: str
    type: str
    message: str
    exit_code: int
    expected_version: NotRequired[int]
    actual_version: NotRequired[int]
    operation: NotRequired[OperationJSON]
    hint: NotRequired[str]


class ErrorJSON(TypedDict):
    """What every console command prints on stdout with ``--json`` when it fails."""

    error: ErrorDetailJSON


#: Every published shape, by the name ``docs/json.md`` gives it.
SHAPES: dict[str, type] = {
    "operation": OperationJSON,
    "audit-entry": AuditEntryJSON,
    "list": OperationListJSON,
    "show": OperationViewJSON,
    "resolve": VerdictReportJSON,
    "compensate": CompensationJSON,
    "compensations": CompensationListJSON,
    "recover": RecoveryReportJSON,
    "stats": StatsJSON,
    "purge": PurgeReportJSON,
    "erase": ErasureReportJSON,
    "deletions": DeletionListJSON,
    "effect-review": ReviewRequestJSON,
    "effect-approval": ApprovalRequestJSON,
    "error": ErrorJSON,
}


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the shape ``name`` (a key of ``SHAPES``).

    Objects are closed (``additionalProperties: false``) except the free-form ones
    (``args``, ``evidence``, ``extra``, a verdict): a field added to an output
    without its shape fails validation instead of drifting.
    """
    from pydantic import TypeAdapter

    if name not in SHAPES:
        raise ValueError(f"no JSON shape named {name!r}; known: {', '.join(SHAPES)}")
    schema: dict[str, Any] = TypeAdapter(SHAPES[name]).json_schema(mode="serialization")
    _close(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every published shape's JSON Schema, by name."""
    return {name: json_schema(name) for name in SHAPES}


def _close(node: Any) -> None:
    """Mark every object with declared properties as closed, in place."""
    if isinstance(node, dict):
        if "properties" in node and node.get("type") == "object":
            node["additionalProperties"] = False
        for value in node.values():
            _close(value)
    elif isinstance(node, list):
        for value in node:
            _close(value)
