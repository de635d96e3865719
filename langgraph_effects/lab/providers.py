"""Simulated external providers that keep their own durable records.

A provider is the system that owns the side effect (a mail service, a payment
API). The crash lab must count effects from *its* records, never from the
worker's logs, so every provider lives in its own SQLite file. Whoever calls it
(the worker's tool code) opens that file with plain `sqlite3`; each call is
one short ``BEGIN IMMEDIATE ... COMMIT`` in WAL mode with ``synchronous=FULL``, so
an effect that was committed survives the caller's SIGKILL a microsecond later.
The lab's parent process reads the same file afterwards to count.

One [`Provider`][langgraph_effects.testing.Provider] class covers the five provider contracts (what a provider
can tell about a call after a crash; see the README), chosen by ``mode``:

``dedup``
    Stripe-like idempotency keys. The first response for a key (errors
    included) is stored and replayed on a repeat with the same payload; another
    payload under the same key raises `IdempotencyMismatch`; a key another
    caller is still processing raises `KeyInFlight`; keys are forgotten
    after ``retention`` seconds (a repeat after that applies the effect again).
``lookup``
    No dedup, but every effect is tagged with the caller's reference and
    [`Provider.get`][langgraph_effects.testing.Provider.get] finds it at once (strongly consistent).
``lagging``
    Only an eventually consistent search:
    [`Provider.list_by_reference`][langgraph_effects.testing.Provider.list_by_reference] shows a record once
    it is ``lag`` seconds old; there is no single-item get.
``withdrawn``
    Records can be withdrawn. The listing drops withdrawn records, while
    [`Provider.get`][langgraph_effects.testing.Provider.get] answers `Withdrawn` (HTTP 410) for them and
    ``None`` (404) for references it never saw.
``blind``
    [`Provider.apply`][langgraph_effects.testing.Provider.apply] just appends; no key, no lookup.

Every call is logged in ``requests``; every applied effect is a row of
``effects`` with the logical operation label taken from the payload (what an
auditor reading the provider's records would group by).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ..core.identity import args_hash, canonical_json

ProviderMode = Literal["dedup", "lookup", "lagging", "withdrawn", "blind"]
MODES: tuple[ProviderMode, ...] = ("dedup", "lookup", "lagging", "withdrawn", "blind")

#: Modes whose ``apply`` takes the caller's key (dedup) or reference (the lookups).
KEYED_MODES: frozenset[str] = frozenset({"dedup", "lookup", "lagging", "withdrawn"})


def _wal(db: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch to WAL, waiting out a concurrent first opener: SQLite answers a journal
    mode change that meets another connection's lock with "database is locked" at
    once, without its busy handler (two tool calls of one turn opening a new file)."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS provider_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,          -- apply | get | list | withdraw
    key TEXT,                    -- idempotency key or reference
    payload TEXT,
    outcome TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (
    id INTEGER PRIMARY KEY,
    operation TEXT NOT NULL,     -- the payload's "operation" label
    key TEXT,                    -- idempotency key or reference, if any
    payload TEXT NOT NULL,
    at REAL NOT NULL,
    withdrawn_at REAL
);
CREATE INDEX IF NOT EXISTS effects_by_key ON effects (key);
CREATE INDEX IF NOT EXISTS effects_by_operation ON effects (operation);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key TEXT PRIMARY KEY,
    payload_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('in_flight', 'done')),
    response TEXT,               -- JSON: the first response, replayed verbatim
    created_at REAL NOT NULL
);
"""


class ProviderError(Exception):
    """Base class of everything a simulated provider answers with an error."""


class IdempotencyMismatch(ProviderError):
    """A key was reused with a different payload (Stripe's ``idempotency_error``)."""


class KeyInFlight(ProviderError):
    """Another request with this key is still being processed (HTTP 409)."""


class ProviderRejected(ProviderError):
    """A definite rejection (HTTP 422): nothing was applied.

    ``replayed`` is true when a dedup provider answers a repeat with the stored
    rejection of the first request.
    """

    def __init__(self, message: str, *, replayed: bool = False) -> None:
        super().__init__(message)
        self.replayed = replayed


class RateLimited(Exception):
    """HTTP 429 before anything was applied: the contract may declare it definite.

    Not a `ProviderError` on purpose: a tool that turns provider errors into
    messages (``ToolNode(handle_tool_errors=(ProviderError, ...))``) leaves this one
    to the node's ``RetryPolicy``, as a user retrying 429s would.
    """


_TOO_MANY = "the provider is rate limiting this caller (429); nothing was applied"


class Unsupported(ProviderError):
    """The call is not part of this provider's contract (e.g. ``get`` on a blind one)."""


@dataclass(frozen=True)
class Receipt:
    """A provider's answer to ``apply``."""

    effect_id: str
    operation: str
    key: str | None
    at: float
    replayed: bool = False
    """True when a dedup provider answered from its stored first response."""


@dataclass(frozen=True)
class EffectRecord:
    """One applied effect, as the provider stores it."""

    effect_id: str
    operation: str
    key: str | None
    payload: dict[str, Any]
    at: float
    withdrawn: bool = False


@dataclass(frozen=True)
class Withdrawn:
    """``get`` on a withdrawn record (HTTP 410): it landed, then was withdrawn."""

    record: EffectRecord


@dataclass(frozen=True)
class Tally:
    """The provider's records compared with the operations that were intended."""

    intended: int
    sends: int
    """``apply`` requests the provider received (replays and rejections included)."""
    lookups: int
    effects: int
    duplicates: int
    missing: int
    withdrawn: int
    per_operation: dict[str, int]


@dataclass(frozen=True)
class _Claim:
    """Dedup: this caller owns the key and must apply the effect."""


def _effect_id(row_id: int) -> str:
    return f"eff_{row_id}"


def _record(row: sqlite3.Row | tuple[Any, ...]) -> EffectRecord:
    row_id, operation, key, payload, at, withdrawn_at = row
    return EffectRecord(
        effect_id=_effect_id(int(row_id)),
        operation=str(operation),
        key=key,
        payload=json.loads(payload),
        at=float(at),
        withdrawn=withdrawn_at is not None,
    )


def _receipt_json(receipt: Receipt) -> str:
    return canonical_json(
        {
            "effect_id": receipt.effect_id,
            "operation": receipt.operation,
            "key": receipt.key,
            "at": receipt.at,
        }
    )


class Provider:
    """A simulated provider whose durable records live in ``path``.

    Args:
        path: the provider's own SQLite file (created on first use).
        mode: one of `MODES`; recorded in the file, and a file opened
            under another mode is refused.
        retention: dedup keys older than this many seconds are forgotten.
        lag: ``lagging`` mode: a record shows in the listing once this old.
        processing_time: dedup mode: seconds between claiming a key and
            applying the effect, during which a repeat gets `KeyInFlight`.
            With 0 the claim and the effect are one transaction.
        in_flight_timeout: a dedup claim older than this is treated as
            abandoned (its caller died mid-request) and may be taken over.
        busy_timeout: seconds to queue for the write lock behind other callers.
        clock: wall-clock seconds; shared by every process using the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: ProviderMode,
        *,
        retention: float = 24 * 3600.0,
        lag: float = 0.0,
        processing_time: float = 0.0,
        in_flight_timeout: float = 30.0,
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown provider mode {mode!r}; expected one of {MODES}")
        self.path = Path(path)
        self.mode: ProviderMode = mode
        self.retention = retention
        self.lag = lag
        self.processing_time = processing_time
        self.in_flight_timeout = in_flight_timeout
        self.busy_timeout = busy_timeout
        self.clock = clock
        # One connection per (process, thread): sqlite3 connections must not cross a
        # fork, and sync tools run on whichever executor thread is free.
        self._local = threading.local()

    # -- connection ---------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross a fork: reopen in a new process.
        db_pid: tuple[sqlite3.Connection, int] | None = getattr(self._local, "db", None)
        if db_pid is not None and db_pid[1] == os.getpid():
            return db_pid[0]
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        _wal(db, self.busy_timeout)
        db.execute("PRAGMA synchronous=FULL")
        db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            row = db.execute("SELECT value FROM provider_meta WHERE name = 'mode'").fetchone()
            if row is None:
                db.execute("INSERT INTO provider_meta VALUES ('mode', ?)", (self.mode,))
            elif row[0] != self.mode:
                raise ProviderError(f"{self.path} holds a {row[0]!r} provider, not {self.mode!r}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            db.close()
            raise
        self._local.db = (db, os.getpid())
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def setup(self) -> Provider:
        """Create the file and its tables now (otherwise done on first use)."""
        self._connection()
        return self

    def close(self) -> None:
        db_pid: tuple[sqlite3.Connection, int] | None = getattr(self._local, "db", None)
        if db_pid is not None and db_pid[1] == os.getpid():
            db_pid[0].close()
        self._local.db = None

    def __enter__(self) -> Provider:
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the provider's API ---------------------------------------------------

    def apply(
        self,
        payload: Mapping[str, Any],
        *,
        key: str | None = None,
        hold: Callable[[], None] | None = None,
    ) -> Receipt:
        """Apply one effect.

        ``key`` is the idempotency key (``dedup``) or our reference
        (``lookup``/``lagging``/``withdrawn``); ``blind`` takes none. A payload
        with a true ``"reject"`` field is refused with `ProviderRejected`
        and applies nothing (a 422).

        ``hold`` keeps the request in flight at the provider until it returns:
        a dedup provider calls it after claiming the key (a concurrent request
        with that key then gets `KeyInFlight`), the others before the
        effect is stored (a lookup meanwhile finds nothing).
        """
        if self.mode in KEYED_MODES and not key:
            raise ValueError(f"a {self.mode} provider needs a key/reference")
        if self.mode == "blind" and key is not None:
            raise Unsupported("a blind provider takes no key")
        body = canonical_json(dict(payload))
        if self.mode != "dedup":
            if hold is not None:
                hold()
            return self._apply_plain(payload, body, key)
        assert key is not None
        return self._apply_dedup(payload, body, key, hold)

    def rate_limit(self, requests: int) -> None:
        """Answer the next ``requests`` ``apply`` calls (from any process) with
        `RateLimited` (429) before anything else: logged, nothing applied, no
        dedup key claimed. Then serve as usual."""
        if requests < 0:
            raise ValueError(f"rate_limit takes a count of requests >= 0, not {requests}")
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO provider_meta VALUES ('rate_limited', ?)", (str(requests),))

    def get(self, reference: str) -> EffectRecord | Withdrawn | None:
        """The record carrying ``reference``, at once; ``None`` if there is none (404).

        Only ``lookup`` and ``withdrawn`` providers offer a single-item get. A
        withdrawn record answers `Withdrawn` (410).
        """
        if self.mode not in ("lookup", "withdrawn"):
            raise Unsupported(f"a {self.mode} provider has no single-item lookup")
        with self._transaction() as db:
            rows = db.execute(
                "SELECT id, operation, key, payload, at, withdrawn_at FROM effects WHERE key = ? ORDER BY id",
                (reference,),
            ).fetchall()
            records = [_record(row) for row in rows]
            live = [r for r in records if not r.withdrawn]
            answer: EffectRecord | Withdrawn | None
            if live:
                answer = live[0]
            elif records:
                answer = Withdrawn(records[0])
            else:
                answer = None
            outcome = "found" if live else ("withdrawn" if records else "not_found")
            self._log(db, "get", reference, None, outcome)
        return answer

    def list_by_reference(self, reference: str) -> list[EffectRecord]:
        """Search by reference. ``lagging`` hides records younger than ``lag``;
        ``withdrawn`` hides withdrawn records (so an empty list proves nothing there).
        """
        if self.mode not in ("lookup", "lagging", "withdrawn"):
            raise Unsupported(f"a {self.mode} provider has no search")
        with self._transaction() as db:
            rows = db.execute(
                "SELECT id, operation, key, payload, at, withdrawn_at FROM effects"
                " WHERE key = ? AND withdrawn_at IS NULL ORDER BY id",
                (reference,),
            ).fetchall()
            records = [_record(row) for row in rows]
            if self.mode == "lagging":
                horizon = self.clock() - self.lag
                records = [r for r in records if r.at <= horizon]
            self._log(db, "list", reference, None, f"{len(records)} found")
        return records

    def withdraw(self, effect_id: str) -> bool:
        """Withdraw one record (``withdrawn`` mode). False if it was not live."""
        if self.mode != "withdrawn":
            raise Unsupported(f"a {self.mode} provider cannot withdraw records")
        row_id = int(effect_id.removeprefix("eff_"))
        with self._transaction() as db:
            changed = db.execute(
                "UPDATE effects SET withdrawn_at = ? WHERE id = ? AND withdrawn_at IS NULL",
                (self.clock(), row_id),
            ).rowcount
            self._log(db, "withdraw", effect_id, None, "withdrawn" if changed else "noop")
        return bool(changed)

    # -- internals ------------------------------------------------------------

    def _turned_away(self, db: sqlite3.Connection, key: str | None, body: str) -> bool:
        """Whether this ``apply`` is one [`rate_limit`][langgraph_effects.testing.Provider.rate_limit] asked
        to answer with a 429
        (logged as ``rate_limited``, the count taken down); inside its transaction."""
        row = db.execute("SELECT value FROM provider_meta WHERE name = 'rate_limited'").fetchone()
        if row is None or int(row[0]) <= 0:
            return False
        db.execute("UPDATE provider_meta SET value = ? WHERE name = 'rate_limited'", (str(int(row[0]) - 1),))
        self._log(db, "apply", key, body, "rate_limited")
        return True

    def _log(self, db: sqlite3.Connection, kind: str, key: str | None, body: str | None, outcome: str) -> int:
        cursor = db.execute(
            "INSERT INTO requests (kind, key, payload, outcome, at) VALUES (?, ?, ?, ?, ?)",
            (kind, key, body, outcome, self.clock()),
        )
        return int(cursor.lastrowid or 0)

    def _append(
        self, db: sqlite3.Connection, payload: Mapping[str, Any], body: str, key: str | None
    ) -> Receipt:
        at = self.clock()
        operation = str(payload.get("operation", ""))
        cursor = db.execute(
            "INSERT INTO effects (operation, key, payload, at) VALUES (?, ?, ?, ?)",
            (operation, key, body, at),
        )
        return Receipt(_effect_id(int(cursor.lastrowid or 0)), operation, key, at)

    def _apply_plain(self, payload: Mapping[str, Any], body: str, key: str | None) -> Receipt:
        receipt: Receipt | Exception
        with self._transaction() as db:
            if self._turned_away(db, key, body):
                receipt = RateLimited(_TOO_MANY)
            elif payload.get("reject"):
                self._log(db, "apply", key, body, "rejected")
                receipt = ProviderRejected("the provider rejected the payload (422)")
            else:
                receipt = self._append(db, payload, body, key)
                self._log(db, "apply", key, body, "applied")
        if isinstance(receipt, Exception):
            raise receipt
        return receipt

    def _apply_dedup(
        self, payload: Mapping[str, Any], body: str, key: str, hold: Callable[[], None] | None = None
    ) -> Receipt:
        digest = args_hash(payload)
        decision: _Claim | Receipt | Exception
        with self._transaction() as db:
            if self._turned_away(db, key, body):  # before the claim: the key is not stored
                decision = RateLimited(_TOO_MANY)
            else:
                decision = self._claim(db, key, digest)
                request_id = self._log(db, "apply", key, body, _outcome_name(decision))
            if isinstance(decision, _Claim) and self.processing_time <= 0 and hold is None:
                # Claim and effect in one transaction: no in-flight window at all.
                decision = self._complete(db, payload, body, key, request_id)
        if isinstance(decision, _Claim):
            time.sleep(self.processing_time)
            if hold is not None:
                hold()
            with self._transaction() as db:
                decision = self._complete(db, payload, body, key, request_id)
        if isinstance(decision, BaseException):
            raise decision
        assert isinstance(decision, Receipt)
        return decision

    def _claim(self, db: sqlite3.Connection, key: str, digest: str) -> _Claim | Receipt | ProviderError:
        now = self.clock()
        row = db.execute(
            "SELECT payload_hash, state, response, created_at FROM idempotency_keys WHERE key = ?",
            (key,),
        ).fetchone()
        if row is not None:
            payload_hash, state, response, created_at = row
            expired = now - float(created_at) > self.retention
            abandoned = state == "in_flight" and now - float(created_at) > self.in_flight_timeout
            if not expired and not abandoned:
                if state == "in_flight":
                    return KeyInFlight(f"a request with key {key!r} is still in progress")
                if payload_hash != digest:
                    return IdempotencyMismatch(f"key {key!r} was first used with a different payload")
                return _replay(json.loads(response))
        db.execute(
            "INSERT OR REPLACE INTO idempotency_keys (key, payload_hash, state, response, created_at)"
            " VALUES (?, ?, 'in_flight', NULL, ?)",
            (key, digest, now),
        )
        return _Claim()

    def _complete(
        self,
        db: sqlite3.Connection,
        payload: Mapping[str, Any],
        body: str,
        key: str,
        request_id: int,
    ) -> Receipt | ProviderRejected:
        outcome: Receipt | ProviderRejected
        if payload.get("reject"):
            outcome = ProviderRejected("the provider rejected the payload (422)")
            stored = canonical_json({"error": str(outcome)})
            label = "rejected"
        else:
            outcome = self._append(db, payload, body, key)
            stored = _receipt_json(outcome)
            label = "applied"
        db.execute(
            "UPDATE idempotency_keys SET state = 'done', response = ? WHERE key = ?",
            (stored, key),
        )
        db.execute("UPDATE requests SET outcome = ? WHERE id = ?", (label, request_id))
        return outcome

    # -- read helpers for the lab's parent ------------------------------------

    def effects(self, operation: str | None = None) -> list[EffectRecord]:
        """Every applied effect (withdrawn ones included), optionally of one operation."""
        db = self._connection()
        sql = "SELECT id, operation, key, payload, at, withdrawn_at FROM effects"
        params: tuple[Any, ...] = ()
        if operation is not None:
            sql += " WHERE operation = ?"
            params = (operation,)
        return [_record(row) for row in db.execute(sql + " ORDER BY id", params)]

    def count_effects(self) -> dict[str, int]:
        """Effects per operation label, withdrawn ones included (they did land)."""
        db = self._connection()
        rows = db.execute("SELECT operation, COUNT(*) FROM effects GROUP BY operation")
        return {str(op): int(n) for op, n in rows}

    def count_requests(self, kind: str | None = None) -> int:
        """How many requests of ``kind`` (all kinds if ``None``) the provider received."""
        db = self._connection()
        if kind is None:
            row = db.execute("SELECT COUNT(*) FROM requests").fetchone()
        else:
            row = db.execute("SELECT COUNT(*) FROM requests WHERE kind = ?", (kind,)).fetchone()
        return int(row[0])

    def last_request_id(self) -> int:
        """The id of the latest request the provider received (0 before the first)."""
        row = self._connection().execute("SELECT MAX(id) FROM requests").fetchone()
        return int(row[0] or 0)

    def tally(self, intended: Sequence[str] | Mapping[str, int]) -> Tally:
        """Compare the provider's records with the intended effects.

        ``intended`` names the operation labels, each meant to take effect once,
        or maps each label to how many effects were meant (two turns asking for
        the same thing mean two). ``duplicates`` counts every effect beyond the
        intended number of its label (and any effect of a label nobody
        intended); ``missing`` counts intended effects that never happened.
        """
        per_operation = self.count_effects()
        wanted = dict(intended) if isinstance(intended, Mapping) else dict.fromkeys(intended, 1)
        effects = sum(per_operation.values())
        kept = sum(min(per_operation.get(op, 0), n) for op, n in wanted.items())
        db = self._connection()
        withdrawn = int(
            db.execute("SELECT COUNT(*) FROM effects WHERE withdrawn_at IS NOT NULL").fetchone()[0]
        )
        return Tally(
            intended=sum(wanted.values()),
            sends=self.count_requests("apply"),
            lookups=self.count_requests("get") + self.count_requests("list"),
            effects=effects,
            duplicates=effects - kept,
            missing=sum(wanted.values()) - kept,
            withdrawn=withdrawn,
            per_operation=per_operation,
        )


def _outcome_name(decision: _Claim | Receipt | ProviderError) -> str:
    if isinstance(decision, _Claim):
        return "claimed"
    if isinstance(decision, Receipt):
        return "replayed"
    if isinstance(decision, ProviderRejected):
        return "replayed_rejection"
    return "in_flight" if isinstance(decision, KeyInFlight) else "mismatch"


def _replay(stored: dict[str, Any]) -> Receipt | ProviderRejected:
    if "error" in stored:
        return ProviderRejected(str(stored["error"]), replayed=True)
    return Receipt(
        effect_id=str(stored["effect_id"]),
        operation=str(stored["operation"]),
        key=cast("str | None", stored["key"]),
        at=float(stored["at"]),
        replayed=True,
    )
