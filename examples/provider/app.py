"""The notification service: a Starlette app over its own SQLite file.

Idempotency works like Stripe's:

* ``POST /notifications`` with an ``Idempotency-Key`` header stores the first
  response under the key and replays it (status and body, errors included, with
  ``Idempotent-Replayed: true``) for every later request with the same key;
* the same key with a different payload is refused: ``422 idempotency_error``;
* a request whose key is still being processed gets ``409 idempotency_key_in_use``;
  a claim older than ``in_flight_timeout`` is taken over (its request died before
  its commit, which is atomic); should the original still be running, it applies
  nothing;
* keys are kept for ``retention`` seconds, after which the key is new again;
* requests that fail validation (``400``) or conflict (``409``) store nothing.

A request without the header is executed every time (a *blind* client).

Lookups, for clients that send their own ``reference``:

* ``GET /notifications/by-reference/{ref}``: strongly consistent. ``200`` with the
  notification, ``404`` if there is none, ``410`` if it was withdrawn;
* ``GET /notifications?reference=...``: a listing that lags ``lag`` seconds behind
  writes (eventually consistent) and hides withdrawn notifications;
* ``POST /notifications/{id}/withdraw``.

Admin endpoints (``/_admin/...``) report health and the service's own counts, list
every notification it holds, and switch faults on: extra ``latency`` before the
commit, ``timeout_next`` (the next POST commits, then sleeps that many seconds
before answering, so the client times out) and ``crash_next`` (the next POST
commits, then the process exits at once with ``os._exit``).

The whole service is one process and one event loop; each request's database work
is a short transaction run on the loop with no ``await`` inside, so requests never
interleave within one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id        TEXT PRIMARY KEY,
    to_addr   TEXT NOT NULL,
    text      TEXT NOT NULL,
    reference TEXT,
    created   REAL NOT NULL,
    withdrawn REAL
);
CREATE INDEX IF NOT EXISTS notifications_reference ON notifications (reference, created);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key         TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    state       TEXT NOT NULL,          -- in_flight | done
    owner       TEXT NOT NULL,          -- the request that holds the key while in flight
    status      INTEGER,
    body        TEXT,
    created     REAL NOT NULL,
    locked_at   REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    at      REAL NOT NULL,
    key     TEXT,
    outcome TEXT NOT NULL               -- created | replayed | mismatch | in_flight | invalid | rejected
);
"""

BLOCKED_DOMAIN = "@blocked.example"


@dataclass
class Faults:
    latency: float = 0.0
    """Seconds every POST /notifications waits before it commits."""
    timeout_next: float = 0.0
    """The next POST commits, then waits this long before answering (0: off)."""
    crash_next: bool = False
    """The next POST commits, then the process dies (``os._exit``)."""


@dataclass(frozen=True)
class Settings:
    db: str
    retention: float = 24 * 3600.0
    """Seconds an idempotency key is kept (Stripe: at least 24 hours)."""
    lag: float = 0.0
    """Seconds the listing lags behind writes."""
    in_flight_timeout: float = 30.0
    """An in-flight key older than this belongs to a request that died before its
    commit (which is atomic), so nothing was applied and the key may be taken over."""


def error(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message}, **extra}, status_code=status)


def fingerprint(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def row_to_notification(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "notification",
        "to": row["to_addr"],
        "text": row["text"],
        "reference": row["reference"],
        "created": row["created"],
        "status": "withdrawn" if row["withdrawn"] is not None else "sent",
    }


class Store:
    """The service's SQLite file: one connection, short immediate transactions."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def log(self, key: str | None, outcome: str) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO requests (at, key, outcome) VALUES (?, ?, ?)", (time.time(), key, outcome)
            )

    def close(self) -> None:
        self.db.close()


def validate(payload: Any) -> str | None:
    """What is wrong with a create request, or None."""
    if not isinstance(payload, dict):
        return "the body must be a JSON object"
    unknown = set(payload) - {"to", "text", "reference"}
    if unknown:
        return f"unknown fields: {sorted(unknown)}"
    if not isinstance(payload.get("to"), str) or "@" not in payload["to"]:
        return "'to' must be an email address"
    if not isinstance(payload.get("text"), str) or not payload["text"]:
        return "'text' must be a non-empty string"
    if payload.get("reference") is not None and not isinstance(payload["reference"], str):
        return "'reference' must be a string"
    return None


def create_app(settings: Settings) -> Starlette:
    faults = Faults()
    store: Store | None = None

    def db() -> Store:
        assert store is not None, "the app is not running"
        return store

    # -- create ------------------------------------------------------------------------

    def apply(payload: dict[str, Any], key: str | None, owner: str | None) -> tuple[int, dict[str, Any]]:
        """Execute the request in one transaction: the notification (or the business
        error) and the stored response under the key commit together."""
        now = time.time()
        with db().transaction() as conn:
            if key is not None:
                held = conn.execute("SELECT owner FROM idempotency_keys WHERE key = ?", (key,)).fetchone()
                if held is None or held["owner"] != owner:
                    # Our claim went stale and another request took the key over: it applies, we don't.
                    conn.execute(
                        "INSERT INTO requests (at, key, outcome) VALUES (?, ?, 'in_flight')", (now, key)
                    )
                    return 409, {
                        "error": {
                            "type": "idempotency_key_in_use",
                            "message": "another request took this Idempotency-Key over",
                        }
                    }
            if payload["to"].endswith(BLOCKED_DOMAIN):
                status = 403
                body: dict[str, Any] = {
                    "error": {"type": "recipient_blocked", "message": f"{payload['to']} does not accept mail"}
                }
                outcome = "rejected"
            else:
                notification_id = f"ntf_{uuid.uuid4().hex[:16]}"
                conn.execute(
                    "INSERT INTO notifications (id, to_addr, text, reference, created)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (notification_id, payload["to"], payload["text"], payload.get("reference"), now),
                )
                row = conn.execute("SELECT * FROM notifications WHERE id = ?", (notification_id,)).fetchone()
                status, body, outcome = 201, row_to_notification(row), "created"
            if key is not None:
                conn.execute(
                    "UPDATE idempotency_keys SET state = 'done', status = ?, body = ? WHERE key = ?",
                    (status, json.dumps(body), key),
                )
            conn.execute("INSERT INTO requests (at, key, outcome) VALUES (?, ?, ?)", (now, key, outcome))
        return status, body

    def claim(key: str, digest: str, owner: str) -> Response | None:
        """Take the key for this request, or answer from what it already holds."""
        now = time.time()
        with db().transaction() as conn:
            row = conn.execute("SELECT * FROM idempotency_keys WHERE key = ?", (key,)).fetchone()
            if row is not None and row["created"] + settings.retention <= now:
                conn.execute("DELETE FROM idempotency_keys WHERE key = ?", (key,))  # expired
                row = None
            if row is None:
                conn.execute(
                    "INSERT INTO idempotency_keys (key, fingerprint, state, owner, created, locked_at)"
                    " VALUES (?, ?, 'in_flight', ?, ?, ?)",
                    (key, digest, owner, now, now),
                )
                return None
            if row["state"] == "in_flight":
                if row["locked_at"] + settings.in_flight_timeout > now:
                    outcome, answer = (
                        "in_flight",
                        error(
                            409,
                            "idempotency_key_in_use",
                            "another request with this Idempotency-Key is being processed; retry later",
                        ),
                    )
                else:  # its request died before committing anything: take it over
                    conn.execute(
                        "UPDATE idempotency_keys SET fingerprint = ?, owner = ?, locked_at = ? WHERE key = ?",
                        (digest, owner, now, key),
                    )
                    return None
            elif row["fingerprint"] != digest:
                outcome, answer = (
                    "mismatch",
                    error(
                        422,
                        "idempotency_error",
                        "this Idempotency-Key was used with different parameters",
                    ),
                )
            else:
                outcome = "replayed"
                answer = JSONResponse(
                    json.loads(row["body"]),
                    status_code=row["status"],
                    headers={"Idempotent-Replayed": "true"},
                )
            conn.execute("INSERT INTO requests (at, key, outcome) VALUES (?, ?, ?)", (now, key, outcome))
            return answer

    async def create(request: Request) -> Response:
        key = request.headers.get("idempotency-key")
        try:
            payload = await request.json()
        except ValueError:
            payload = None
        problem = validate(payload)
        if problem is not None:  # nothing ran: nothing is stored under the key
            db().log(key, "invalid")
            return error(400, "invalid_request_error", problem)
        owner = uuid.uuid4().hex
        if key is not None:
            answered = claim(key, fingerprint(payload), owner)
            if answered is not None:
                return answered
        try:
            if faults.latency:
                await asyncio.sleep(faults.latency)
            status, body = apply(payload, key, owner)
        except BaseException:
            if key is not None:  # nothing was applied: free the key at once
                with db().transaction() as conn:
                    conn.execute(
                        "DELETE FROM idempotency_keys WHERE key = ? AND state = 'in_flight' AND owner = ?",
                        (key, owner),
                    )
            raise
        # -- committed. The faults below hit after the effect is durable. --
        if faults.crash_next:
            faults.crash_next = False
            os._exit(17)
        if faults.timeout_next:
            hold, faults.timeout_next = faults.timeout_next, 0.0
            await asyncio.sleep(hold)
        return JSONResponse(body, status_code=status)

    # -- lookups -----------------------------------------------------------------------

    async def by_reference(request: Request) -> Response:
        reference = request.path_params["reference"]
        row = (
            db()
            .db.execute(
                "SELECT * FROM notifications WHERE reference = ? ORDER BY created LIMIT 1", (reference,)
            )
            .fetchone()
        )
        if row is None:
            return error(404, "not_found", f"no notification has reference {reference!r}")
        if row["withdrawn"] is not None:
            return error(
                410, "withdrawn", "the notification was withdrawn", notification=row_to_notification(row)
            )
        return JSONResponse(row_to_notification(row))

    async def get_one(request: Request) -> Response:
        row = (
            db()
            .db.execute("SELECT * FROM notifications WHERE id = ?", (request.path_params["id"],))
            .fetchone()
        )
        if row is None:
            return error(404, "not_found", "no such notification")
        if row["withdrawn"] is not None:
            return error(
                410, "withdrawn", "the notification was withdrawn", notification=row_to_notification(row)
            )
        return JSONResponse(row_to_notification(row))

    async def listing(request: Request) -> Response:
        """Eventually consistent: only what was written ``lag`` seconds ago, never withdrawn items."""
        horizon = time.time() - settings.lag
        query = "SELECT * FROM notifications WHERE withdrawn IS NULL AND created <= ?"
        params: list[Any] = [horizon]
        for field, column in (("reference", "reference"), ("to", "to_addr")):
            if field in request.query_params:
                query += f" AND {column} = ?"
                params.append(request.query_params[field])
        rows = db().db.execute(query + " ORDER BY created", params).fetchall()
        return JSONResponse({"object": "list", "data": [row_to_notification(r) for r in rows]})

    async def withdraw(request: Request) -> Response:
        with db().transaction() as conn:
            conn.execute(
                "UPDATE notifications SET withdrawn = COALESCE(withdrawn, ?) WHERE id = ?",
                (time.time(), request.path_params["id"]),
            )
            row = conn.execute(
                "SELECT * FROM notifications WHERE id = ?", (request.path_params["id"],)
            ).fetchone()
        if row is None:
            return error(404, "not_found", "no such notification")
        return JSONResponse(row_to_notification(row))

    # -- admin -------------------------------------------------------------------------

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "pid": os.getpid(), "settings": asdict(settings)})

    async def stats(request: Request) -> Response:
        conn = db().db
        outcomes = dict(conn.execute("SELECT outcome, COUNT(*) FROM requests GROUP BY outcome").fetchall())
        total, withdrawn = conn.execute("SELECT COUNT(*), COUNT(withdrawn) FROM notifications").fetchone()
        return JSONResponse(
            {
                "notifications": total,
                "withdrawn": withdrawn,
                "posts": sum(outcomes.values()),
                "outcomes": outcomes,
            }
        )

    async def all_notifications(request: Request) -> Response:
        rows = db().db.execute("SELECT * FROM notifications ORDER BY created").fetchall()
        return JSONResponse({"object": "list", "data": [row_to_notification(r) for r in rows]})

    async def get_faults(request: Request) -> Response:
        return JSONResponse(asdict(faults))

    async def set_faults(request: Request) -> Response:
        changes = await request.json()
        known = set(asdict(faults))
        if not isinstance(changes, dict) or set(changes) - known:
            return error(400, "invalid_request_error", f"faults are {sorted(known)}")
        for name, value in changes.items():
            setattr(faults, name, type(getattr(faults, name))(value))
        return JSONResponse(asdict(faults))

    async def clear_faults(request: Request) -> Response:
        for name, value in asdict(Faults()).items():
            setattr(faults, name, value)
        return JSONResponse(asdict(faults))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal store
        store = Store(settings.db)
        try:
            yield
        finally:
            store.close()

    return Starlette(
        routes=[
            Route("/notifications", create, methods=["POST"]),
            Route("/notifications", listing, methods=["GET"]),
            Route("/notifications/by-reference/{reference}", by_reference, methods=["GET"]),
            Route("/notifications/{id}", get_one, methods=["GET"]),
            Route("/notifications/{id}/withdraw", withdraw, methods=["POST"]),
            Route("/_admin/health", health, methods=["GET"]),
            Route("/_admin/stats", stats, methods=["GET"]),
            Route("/_admin/notifications", all_notifications, methods=["GET"]),
            Route("/_admin/faults", get_faults, methods=["GET"]),
            Route("/_admin/faults", set_faults, methods=["POST"]),
            Route("/_admin/faults", clear_faults, methods=["DELETE"]),
        ],
        lifespan=lifespan,
    )
