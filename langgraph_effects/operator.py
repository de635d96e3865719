"""The operator API: find unresolved operations, inspect one, record a verdict.

This is what the console (``langgraph-effects list/show/resolve``) is built on, and
what a service or a notebook can call directly. It is ledger-agnostic (SQLite,
Postgres, in-memory) and async::

    async with open_ledger("agent.db") as ledger:
        for op in await list_operations(ledger):  # unresolved ones, oldest first
            view = await show(ledger, op.op_id)
        await resolve(
            ledger, op_id, {"type": "landed", "receipt": {"id": "r1"}},
            expected_version=view.operation.version, actor="alice",
        )

A verdict is bound to the version the operator saw (``expected_version``): if the
operation moved since, it is refused and nothing changes. It is idempotent by its
decision id. It is written with :func:`langgraph_effects.review.decision_change`, the
same change an answer to the graph's ``interrupt()`` produces, so the graph honours
it on its next resume exactly as if it had been given through ``Command(resume=...)``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from .errors import (
    EffectsError,
    LeaseLiveError,
    LedgerCorruptError,
    LedgerNotFoundError,
    LedgerUnavailableError,
    NotResolvableError,
    OperationNotFoundError,
    SchemaBehindError,
    SchemaTooNewError,
    StaleVersionError,
    VerdictNotRecordedError,
)
from .lease import lease_expired, owner_alive
from .ledger.base import AuditEntry, Ledger, OperationQuery
from .ledger.sqlite import SqliteLedger
from .operation import DECIDABLE, UNRESOLVED, Change, Event, Operation, State
from .review import (
    AbandonDecision,
    LandedDecision,
    NotLandedDecision,
    decision_change,
    parse_decision,
)

__all__ = [
    "DECISION_TYPES",
    "DEFAULT_CONNECT_TIMEOUT",
    "LeaseLiveError",
    "LeaseStatus",
    "LedgerNotFoundError",
    "NotResolvableError",
    "OperationView",
    "Resolution",
    "VerdictNotRecordedError",
    "allowed_decisions",
    "describe_target",
    "has_password",
    "is_postgres_dsn",
    "lease_status",
    "list_operations",
    "new_decision_id",
    "open_ledger",
    "operation_to_json",
    "redact_dsn",
    "resolve",
    "resolve_report",
    "setup_database",
    "show",
]

#: The verdicts an operator can give, in the order the console offers them.
DECISION_TYPES: tuple[str, ...] = ("landed", "not_landed", "abandon")

#: States an operator may decide on (plus ``dispatched`` once its lease expired).
RESOLVABLE: frozenset[State] = DECIDABLE  # the state machine says which states take a verdict

LeaseStatus = Literal["live", "expired", "owner_dead"]
"""A ``dispatched`` operation's lease: someone is sending it (``live``), or its sender
is gone (``expired`` by time, or ``owner_dead``: its process is provably dead)."""

AnyDecision = LandedDecision | NotLandedDecision | AbandonDecision


# -- opening a ledger ---------------------------------------------------------------

#: Seconds the console waits for a connection (Postgres) or a write lock (SQLite).
DEFAULT_CONNECT_TIMEOUT = 5.0

# libpq's connection keywords: ``host=db port=5432 dbname=app`` is a Postgres DSN.
_LIBPQ_KEYWORD = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|sslrootcert|"
    r"connect_timeout|options|application_name|target_session_attrs|channel_binding|"
    r"gssencmode|sslcert|sslkey|krbsrvname|require_auth)\s*=",
    re.IGNORECASE,
)
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def is_postgres_dsn(db: str) -> bool:
    """Whether ``db`` names a Postgres database.

    A URL (``postgres://`` or ``postgresql://``) or a libpq key/value string
    (``host=127.0.0.1 port=5432 dbname=app``); anything else is a SQLite path.
    """
    return db.lower().startswith(("postgres://", "postgresql://")) or bool(_LIBPQ_KEYWORD.match(db))


def redact_dsn(db: str) -> str:
    """``db`` safe to print: a Postgres DSN's password is replaced by ``***``."""
    if not is_postgres_dsn(db):
        return db
    if _LIBPQ_KEYWORD.match(db) and "://" not in db:
        return _KV_PASSWORD.sub(lambda m: m.group(1) + "***", db)
    try:
        parts = urlsplit(db)
        if parts.password is None:
            return db
        userinfo = f"{parts.username or ''}:***"
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))
    except ValueError:
        return db.split("://", 1)[0] + "://***"


def has_password(db: str) -> bool:
    """Whether ``db`` carries a password (so it must not be printed as is)."""
    return redact_dsn(db) != db


def describe_target(db: str, *, schema: str | None = None) -> str:
    """Where ``db`` points, for a "connecting to ..." line: never the password."""
    if not is_postgres_dsn(db):
        path = _sqlite_path(db)
        return f"SQLite file {Path(path).absolute() if path != ':memory:' else path}"
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(db)
    except Exception:  # no psycopg, or a DSN libpq cannot parse: it fails on connect
        return f"Postgres {redact_dsn(db)}"
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    name = str(params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "")
    user = params.get("user") or os.environ.get("PGUSER")
    text = f"Postgres {host}:{port}/{name}"
    if user:
        text += f" as {user}"
    if schema:
        text += f", schema {schema}"
    return text


def _sqlite_path(db: str) -> str:
    """A SQLite path from ``db``: a plain path, or ``sqlite:<path>`` as ledgers print it."""
    return db[len("sqlite:") :] if db.startswith("sqlite:") else db


@asynccontextmanager
async def open_ledger(
    db: str,
    *,
    read_only: bool = False,
    schema: str | None = None,
    connect_timeout: float | None = None,
) -> AsyncIterator[Ledger]:
    """Open the ledger named by ``db`` (which must hold one), and close it afterwards.

    ``db`` is a SQLite file path (``sqlite:<path>`` also works) or a Postgres DSN
    (``postgresql://...`` or ``host=... dbname=...``; needs the ``postgres`` extra),
    with the ledger's tables in ``schema`` if given.

    Nothing is ever created or migrated here (that is ``setup()``'s job, or
    ``langgraph-effects setup``): a database without a ledger is refused with
    :class:`LedgerNotFoundError` rather than answered with "nothing unresolved", so
    an operator who mistypes a path or a database name is told so. A ledger at an
    older or newer schema version is refused too. ``read_only`` opens it so that
    nothing can be written (what ``list``/``show`` use): it never waits for another
    process's write lock. ``connect_timeout`` (seconds) bounds connecting to Postgres,
    and waiting for SQLite's write lock. ``":memory:"`` opens a throw-away ledger.
    Raises :class:`~langgraph_effects.errors.LedgerError` subclasses when the store
    cannot be used.
    """
    async with AsyncExitStack() as stack:
        if is_postgres_dsn(db):
            ledger: Ledger = await _enter_postgres(
                stack, db, read_only=read_only, schema=schema, connect_timeout=connect_timeout
            )
        else:
            if schema is not None:
                raise ValueError(
                    "a schema applies to a Postgres ledger only; a SQLite file has none "
                    "(drop --schema, or give a postgresql:// DSN)."
                )
            path = _sqlite_path(db)
            if path == ":memory:":
                memory = await stack.enter_async_context(SqliteLedger.from_conn_string(path))
                await memory.setup()
                yield memory
                return
            where = Path(path)
            if not where.exists():
                raise LedgerNotFoundError(path)
            if not where.is_file():
                raise LedgerCorruptError(
                    f"{path} is not a file (a directory?). Point --db at the SQLite "
                    "database file that holds the ledger; nothing was written."
                )
            busy_ms = int(1000 * (connect_timeout if connect_timeout is not None else 30.0))
            # Checked on a read-only connection first: opening for writes switches the
            # file to WAL, which would write to a database that turns out not to be ours.
            async with SqliteLedger.from_conn_string(path, read_only=True) as probe:
                await _check_schema(probe, path, probe.where)
            sqlite = await stack.enter_async_context(
                SqliteLedger.from_conn_string(path, read_only=read_only, busy_timeout_ms=busy_ms)
            )
            ledger = sqlite
        yield ledger


async def _check_schema(ledger: Any, name: str, where: str, *, postgres: bool = False) -> None:
    """Refuse a database without a ledger, or with one at another schema version (reads only)."""
    found = await ledger.schema_version()
    expected = _schema_version(postgres)
    if found is None:
        raise LedgerNotFoundError(name, empty=True, postgres=postgres, schema=getattr(ledger, "schema", None))
    if found > expected:
        raise SchemaTooNewError(found, expected, where)
    if found < expected:
        raise SchemaBehindError(found, expected, where)


def _schema_version(postgres: bool) -> int:
    if postgres:
        from .ledger.postgres import SCHEMA_VERSION as PG_VERSION

        return PG_VERSION
    from .ledger.sqlite import SCHEMA_VERSION as SQLITE_VERSION

    return SQLITE_VERSION


async def _enter_postgres(
    stack: AsyncExitStack,
    db: str,
    *,
    read_only: bool,
    schema: str | None,
    connect_timeout: float | None,
) -> Ledger:
    shown = redact_dsn(db)
    try:
        from .ledger.postgres import PostgresLedger
    except ImportError as error:
        raise LedgerUnavailableError(
            f"cannot open {shown}: the Postgres backend is not available ({error}). "
            "Install it with `pip install 'langgraph-effects[postgres]'`."
        ) from error
    limit = connect_timeout if connect_timeout is not None else 30.0
    await _probe_postgres(db, limit)
    try:
        ledger = await stack.enter_async_context(
            PostgresLedger.from_conn_string(
                db,
                schema=schema,
                min_size=1,
                max_size=2,
                timeout=limit,
                read_only=read_only,
                connect_timeout=limit,
            )
        )
        await _check_schema(ledger, shown, ledger.where, postgres=True)
    except EffectsError:
        raise
    except Exception as error:
        if type(error).__module__.split(".", 1)[0] != "psycopg":
            raise
        raise LedgerUnavailableError(
            f"cannot use the ledger at {shown}: {type(error).__name__}: {error}. Check that the "
            "server is up and the DSN (host, port, database, user, password) is right; "
            "nothing was written."
        ) from error
    return ledger


async def _probe_postgres(db: str, timeout: float) -> None:
    """One plain connection attempt first: a refused port or a wrong password fails at once
    with the server's own reason, instead of a pool retrying until its timeout."""
    import psycopg

    try:
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(db, connect_timeout=max(2, round(timeout))),
            timeout=timeout + 1,
        )
    except (psycopg.Error, asyncio.TimeoutError, OSError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        if isinstance(error, asyncio.TimeoutError):
            reason = f"no answer within {timeout:g}s"
        raise LedgerUnavailableError(
            f"could not connect to the ledger at {describe_target(db)} ({reason}). Check that the "
            "server is running and reachable and that the DSN (host, port, database, user, "
            "password) is right, or raise --connect-timeout; nothing was written, retrying "
            "later is safe."
        ) from error
    await conn.close()


async def setup_database(
    db: str, *, schema: str | None = None, connect_timeout: float | None = None
) -> str:
    """Create or migrate the ledger and LangGraph's checkpoint tables in ``db``.

    What ``langgraph-effects setup`` runs: ``EffectSqliteSaver.setup()`` (the SQLite
    file is created if missing) or ``EffectPostgresSaver.setup()`` (safe from many
    processes at once). Returns where the ledger is, for messages.
    """
    if is_postgres_dsn(db):
        try:
            from .checkpoint.postgres import EffectPostgresSaver
        except ImportError as error:
            raise LedgerUnavailableError(
                f"cannot open {redact_dsn(db)}: the Postgres backend is not available ({error}). "
                "Install it with `pip install 'langgraph-effects[postgres]'`."
            ) from error
        await _probe_postgres(db, connect_timeout if connect_timeout is not None else 30.0)
        async with EffectPostgresSaver.from_conn_string(
            db, ledger_schema=schema, ledger_max_size=2, connect_timeout=connect_timeout
        ) as saver:
            await saver.setup()
            return saver.ledger.where
    if schema is not None:
        raise ValueError("a schema applies to a Postgres ledger only (drop --schema).")
    from .checkpoint.sqlite import EffectSqliteSaver

    path = _sqlite_path(db)
    if Path(path).is_dir():
        raise LedgerCorruptError(
            f"{path} is a directory. Give the path of the SQLite database file to create or migrate."
        )
    async with EffectSqliteSaver.from_conn_string(path) as sqlite_saver:
        await sqlite_saver.setup()
        return sqlite_saver.ledger.where


# -- reading ------------------------------------------------------------------------


def lease_status(op: Operation, *, now: float | None = None) -> LeaseStatus | None:
    """The lease of a ``dispatched`` operation (``None`` in any other state).

    Consistent with :func:`langgraph_effects.lease.lease_expired`: ``live`` exactly
    when it is not expired.
    """
    if op.state is not State.DISPATCHED:
        return None
    if not lease_expired(op, now=now):
        return "live"
    if op.owner is not None and owner_alive(op.owner) is False:
        return "owner_dead"
    return "expired"


def allowed_decisions(op: Operation, *, now: float | None = None) -> tuple[str, ...]:
    """The verdicts an operator may give on ``op`` now (empty: nothing to decide)."""
    if op.state in DECIDABLE:
        return DECISION_TYPES
    if op.state is State.DISPATCHED and lease_expired(op, now=now):
        return DECISION_TYPES
    return ()


@dataclass(frozen=True)
class OperationView:
    """Everything an operator needs to decide on one operation."""

    operation: Operation
    audit: tuple[AuditEntry, ...]
    """Every transition, oldest first."""
    lease: LeaseStatus | None
    """The dispatch lease, for a ``dispatched`` operation."""
    allowed_decisions: tuple[str, ...]
    """``landed``/``not_landed``/``abandon`` when a verdict may be given now, else empty."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the result bytes are summarised, never included)."""
        return {
            "operation": operation_to_json(self.operation),
            "lease": self.lease,
            "allowed_decisions": list(self.allowed_decisions),
            "audit": [audit_to_json(entry) for entry in self.audit],
        }


async def list_operations(
    ledger: Ledger,
    *,
    states: Iterable[State | str] | None = None,
    thread_id: str | None = None,
    tenant: str | None = None,
    tool: str | None = None,
    older_than: float | None = None,
    limit: int = 100,
    now: float | None = None,
) -> list[Operation]:
    """Operations matching the filters, least recently changed first.

    ``states`` defaults to the unresolved ones (``pending``, ``dispatched``,
    ``unknown``, ``review``). ``older_than`` (seconds) keeps only operations that
    have not changed for at least that long. Use :func:`lease_status` to tell a
    ``dispatched`` operation whose sender is gone from one being sent right now.
    """
    wanted = frozenset(State(s) for s in states) if states is not None else UNRESOLVED
    if not wanted:
        wanted = UNRESOLVED
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    updated_before = None
    if older_than is not None:
        if older_than < 0:
            raise ValueError(f"older_than must be a number of seconds >= 0, not {older_than}")
        updated_before = (time.time() if now is None else now) - older_than
    query = OperationQuery(
        states=wanted,
        thread_id=thread_id,
        tenant=tenant,
        tool=tool,
        updated_before=updated_before,
        limit=limit,
    )
    return await ledger.list_operations(query)


async def _get_scoped(ledger: Ledger, op_id: str, tenant: str | None) -> Operation:
    op = await ledger.get(op_id)
    if op is None or (tenant is not None and op.tenant != tenant):
        # Another tenant's operation is reported exactly like a missing one.
        raise OperationNotFoundError(op_id)
    return op


async def show(ledger: Ledger, op_id: str, *, tenant: str | None = None) -> OperationView:
    """One operation with its audit trail, lease status and the verdicts allowed now.

    With ``tenant``, an operation of another tenant is reported as not found.
    Arguments are stored redacted; the stored result is never part of the view's
    JSON (only its type, size and digest).
    """
    op = await _get_scoped(ledger, op_id, tenant)
    trail = await ledger.audit(op_id)
    stamp = time.time()
    return OperationView(
        operation=op,
        audit=tuple(trail),
        lease=lease_status(op, now=stamp),
        allowed_decisions=allowed_decisions(op, now=stamp),
    )


# -- deciding -----------------------------------------------------------------------


def new_decision_id() -> str:
    """A fresh decision id (``dec_`` + a uuid4). Reuse it to retry the same decision."""
    return f"dec_{uuid.uuid4().hex}"


@dataclass(frozen=True)
class Resolution:
    """What :func:`resolve_report` did."""

    operation: Operation
    """The operation as stored afterwards."""
    decision_id: str
    replayed: bool
    """The decision id was already applied with this content: nothing changed."""
    lease_lost: bool
    """The operation was ``dispatched`` with an expired lease: it was first recorded as
    lost (``dispatched -> unknown``), then the verdict was applied."""
    from_state: State
    """The state the operation was in when the operator decided."""


async def resolve(
    ledger: Ledger,
    op_id: str,
    decision: AnyDecision | Mapping[str, Any],
    *,
    expected_version: int,
    decision_id: str | None = None,
    actor: str,
    tenant: str | None = None,
    channel: Literal["console", "api"] = "api",
) -> Operation:
    """Record an operator's verdict on ``op_id``; returns the operation afterwards.

    ``decision`` is a review decision model or a mapping such as
    ``{"type": "landed", "receipt": {...}}``, ``{"type": "not_landed"}`` or
    ``{"type": "abandon", "reason": "..."}`` (see :mod:`langgraph_effects.review`).

    Refusals change nothing:

    * ``expected_version`` is not the operation's version:
      :class:`~langgraph_effects.errors.StaleVersionError` (read it again);
    * the operation is ``dispatched`` under a live lease: :class:`LeaseLiveError`
      (someone is sending it right now);
    * it is ``pending`` or terminal: :class:`NotResolvableError` (an
      :class:`~langgraph_effects.errors.IllegalTransitionError`);
    * ``decision_id`` was already used with other content:
      :class:`~langgraph_effects.errors.DecisionConflictError`;
    * with ``tenant``, an operation of another tenant:
      :class:`~langgraph_effects.errors.OperationNotFoundError`.

    The same ``decision_id`` with the same content again is a no-op that returns the
    stored operation (safe to retry). A ``dispatched`` operation whose lease expired
    (or whose owner died) is first recorded as lost (``dispatched -> unknown``, at
    ``expected_version``), then decided at ``expected_version + 1``; if that second
    write fails, :class:`VerdictNotRecordedError` says so (the operation is then
    ``unknown``, waiting for a verdict at the new version).
    """
    report = await resolve_report(
        ledger,
        op_id,
        decision,
        expected_version=expected_version,
        decision_id=decision_id,
        actor=actor,
        tenant=tenant,
        channel=channel,
    )
    return report.operation


async def resolve_report(
    ledger: Ledger,
    op_id: str,
    decision: AnyDecision | Mapping[str, Any],
    *,
    expected_version: int,
    decision_id: str | None = None,
    actor: str,
    tenant: str | None = None,
    channel: Literal["console", "api"] = "api",
) -> Resolution:
    """:func:`resolve`, reporting what happened (replayed, lease recorded as lost)."""
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise TypeError(f"expected_version must be an int, not {expected_version!r}")
    if expected_version < 1:
        raise ValueError(f"expected_version must be at least 1, not {expected_version}")
    if not actor:
        raise ValueError("actor must name who decides (it goes into the audit trail)")
    parsed = parse_decision(decision)
    did = decision_id if decision_id is not None else new_decision_id()
    if not did:
        raise ValueError("decision_id must not be empty")
    change = decision_change(parsed, decision_id=did, actor=actor, channel=channel)

    op = await _get_scoped(ledger, op_id, tenant)

    if op.state is State.DISPATCHED and did not in dict(op.decisions):
        return await _decide_lost(ledger, op, change, did, expected_version, actor, channel)
    # The state machine checks the rest, in this order: a decision id already applied
    # (a replay, or a conflict), the version, then whether the state takes a verdict.
    result = await ledger.apply(
        op.op_id, change, expected_version=expected_version, actor=actor, decidable_only=True
    )
    return Resolution(
        result.op, did, replayed=not result.applied, lease_lost=False, from_state=op.state
    )


async def _decide_lost(
    ledger: Ledger,
    op: Operation,
    change: Change,
    did: str,
    expected_version: int,
    actor: str,
    channel: str,
) -> Resolution:
    """A verdict on a ``dispatched`` operation: only once its lease is gone, and after
    recording it as lost (``dispatched -> unknown``)."""
    stamp = time.time()
    if not lease_expired(op, now=stamp):
        if op.version != expected_version:
            raise StaleVersionError(op.op_id, expected_version, op.version)  # read it again first
        raise LeaseLiveError(op, now=stamp)
    lost = await ledger.transition(
        op.op_id,
        Change(event=Event.LOSE, evidence=_lease_evidence(op, actor, channel, stamp)),
        expected_version=expected_version,
        actor=actor,
    )
    try:
        after = await ledger.transition(op.op_id, change, expected_version=lost.version, actor=actor)
    except Exception as error:
        raise VerdictNotRecordedError(lost, error) from error
    return Resolution(after, did, replayed=False, lease_lost=True, from_state=op.state)


def _lease_evidence(op: Operation, actor: str, channel: str, now: float) -> dict[str, Any]:
    alive = owner_alive(op.owner) if op.owner is not None else None
    return {
        "kind": "lease",
        "reason": "owner_dead" if alive is False else "expired",
        "owner": op.owner.to_json() if op.owner is not None else None,
        "lease_expires_at": op.lease_expires_at,
        "observed_at": now,
        "actor": actor,
        "channel": channel,
    }


# -- JSON -----------------------------------------------------------------------------


def operation_to_json(op: Operation, *, now: float | None = None) -> dict[str, Any]:
    """A JSON-ready dict of ``op`` (as stored: arguments redacted).

    The stored tool result is never included, only ``{"type", "bytes", "sha256"}``.
    """
    stamp = time.time() if now is None else now
    result = None
    if op.result is not None:
        result = {
            "type": op.result_type,
            "bytes": len(op.result),
            "sha256": hashlib.sha256(op.result).hexdigest(),
        }
    return {
        "op_id": op.op_id,
        "state": op.state.value,
        "version": op.version,
        "terminal": op.terminal,
        "lease": lease_status(op, now=stamp),
        "allowed_decisions": list(allowed_decisions(op, now=stamp)),
        "tool": op.tool,
        "contract": op.contract,
        "thread_id": op.thread_id,
        "checkpoint_ns": op.checkpoint_ns,
        "tenant": op.tenant,
        "policy_version": op.policy_version,
        "tool_call_id": op.tool_call_id,
        "message_id": op.message_id,
        "task_id": op.task_id,
        "checkpoint_id": op.checkpoint_id,
        "args": dict(op.args),
        "args_hash": op.args_hash,
        "provider_key": op.provider_key,
        "attempts": op.attempts,
        "owner": op.owner.to_json() if op.owner is not None else None,
        "lease_expires_at": op.lease_expires_at,
        "dispatched_at": op.dispatched_at,
        "result": result,
        "evidence": dict(op.evidence) if op.evidence is not None else None,
        "decision_ids": [decision for decision, _ in op.decisions],
        "extra": dict(op.extra),
        "created_at": op.created_at,
        "updated_at": op.updated_at,
    }


def audit_to_json(entry: AuditEntry) -> dict[str, Any]:
    """A JSON-ready dict of one audit entry."""
    data = dataclasses.asdict(entry)
    data["from_state"] = entry.from_state.value if entry.from_state is not None else None
    data["to_state"] = entry.to_state.value
    data["evidence"] = dict(entry.evidence) if entry.evidence is not None else None
    return data
