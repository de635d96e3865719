"""A ticketing MCP server that keeps its own records, for the MCP tools guide
(``docs/mcp.md``) and the tests that run agents against it.

Tools:

* ``create_ticket(title, idempotency_key)``: opens a ticket; a second call with a key
  it already has answers with the first ticket and opens nothing (dedup by key);
* ``open_ticket(title)``: the same effect with no key parameter; it deduplicates on
  the key it finds in the request's ``_meta`` (``io.langgraph-effects/idempotency-key``)
  or, over HTTP, in an ``Idempotency-Key`` header, and on nothing when neither came;
* ``find_ticket(idempotency_key)``: the lookup by key (``{"found": false}`` when absent);
* ``post_note(text)``: a blind effect: no key, no lookup, every call appends a note.

Each tool carries MCP annotations (``readOnlyHint`` on ``find_ticket``,
``idempotentHint`` on ``create_ticket``, ...): hints that ``langgraph-effects
mcp-tools`` reads to suggest a contract, never a contract themselves.

Every ticket and note is a row in the server's own SQLite file, committed before the
answer is sent: what a test counts there is what happened, whatever the client saw.

Run it::

    python examples/mcp_server.py --db tickets.sqlite                 # stdio
    python examples/mcp_server.py --db tickets.sqlite --http 8765     # streamable HTTP at /mcp

Needs the ``mcp`` extra: ``pip install "langgraph-effects[mcp]"``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import ToolAnnotations

META_KEY = "io.langgraph-effects/idempotency-key"
"""The ``_meta`` entry this server reads a key from (the client's vendor key)."""
HEADER = "idempotency-key"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    via TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    text TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tool TEXT NOT NULL,
    idempotency_key TEXT,
    at REAL NOT NULL
)
"""


class Tickets:
    """The server's own records: one SQLite file, one transaction per request."""

    def __init__(self, path: str) -> None:
        self.path = path
        with self._db() as db:
            db.executescript(_SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    def create(self, title: str, key: str | None, *, tool: str, via: str) -> dict[str, Any]:
        """Open a ticket, or answer with the one already opened under ``key``."""
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO requests (tool, idempotency_key, at) VALUES (?, ?, ?)", (tool, key, time.time())
            )
            if key:
                row = db.execute("SELECT id, title FROM tickets WHERE idempotency_key = ?", (key,)).fetchone()
                if row is not None:
                    db.execute("COMMIT")
                    return {"ticket_id": f"T-{row[0]}", "title": row[1], "replayed": True}
            cursor = db.execute(
                "INSERT INTO tickets (title, idempotency_key, via, created_at) VALUES (?, ?, ?, ?)",
                (title, key or None, via, time.time()),
            )
            db.execute("COMMIT")
            return {"ticket_id": f"T-{cursor.lastrowid}", "title": title, "replayed": False}
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def find(self, key: str) -> dict[str, Any]:
        db = self._db()
        try:
            row = db.execute("SELECT id, title FROM tickets WHERE idempotency_key = ?", (key,)).fetchone()
        finally:
            db.close()
        if row is None:
            return {"found": False}
        return {"found": True, "ticket_id": f"T-{row[0]}", "title": row[1]}

    def note(self, text: str) -> dict[str, Any]:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO requests (tool, idempotency_key, at) VALUES ('post_note', NULL, ?)",
                (time.time(),),
            )
            cursor = db.execute("INSERT INTO notes (text, created_at) VALUES (?, ?)", (text, time.time()))
            db.execute("COMMIT")
        finally:
            db.close()
        return {"note_id": f"N-{cursor.lastrowid}"}


def _key_from_request(ctx: Context[Any, Any, Any]) -> tuple[str | None, str]:
    """The key the client sent outside the arguments: ``_meta`` first, then the header."""
    request_context = ctx.request_context
    meta = request_context.meta
    found = (meta.model_extra or {}).get(META_KEY) if meta is not None else None
    if found:
        return str(found), "meta"
    http = request_context.request
    headers = getattr(http, "headers", None)
    if headers is not None and headers.get(HEADER):
        return str(headers.get(HEADER)), "header"
    return None, "none"


def build_server(
    db_path: str, *, host: str = "127.0.0.1", port: int = 8000, drop_once: str | None = None
) -> FastMCP:
    """The ticketing server over the records in ``db_path``. With ``drop_once`` (a file
    path), the first ticket call that finds no such file creates it and the process
    exits after applying the call, before answering (the lost-response fault)."""
    tickets = Tickets(db_path)
    server = FastMCP("tickets", host=host, port=port, log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
    def create_ticket(title: str, idempotency_key: str) -> dict[str, Any]:
        """Open a support ticket. Calls repeating an ``idempotency_key`` open nothing new."""
        return _dropping(tickets.create(title, idempotency_key, tool="create_ticket", via="argument"))

    @server.tool(annotations=ToolAnnotations(destructiveHint=False))
    def open_ticket(title: str, ctx: Context[Any, Any, Any]) -> dict[str, Any]:
        """Open a support ticket (deduplicated on the request's idempotency key, if any)."""
        key, via = _key_from_request(ctx)
        return _dropping(tickets.create(title, key, tool="open_ticket", via=via))

    def _dropping(answer: dict[str, Any]) -> dict[str, Any]:
        # A lost response: the ticket is committed, then the server dies before answering.
        if drop_once is not None and not os.path.exists(drop_once):
            open(drop_once, "w").close()
            os._exit(1)
        return answer

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def find_ticket(idempotency_key: str) -> dict[str, Any]:
        """The ticket opened under ``idempotency_key``, or ``{"found": false}``."""
        return tickets.find(idempotency_key)

    @server.tool(annotations=ToolAnnotations(idempotentHint=False, destructiveHint=False))
    def post_note(text: str) -> dict[str, Any]:
        """Append a note to the support log (no key, no lookup: a blind effect)."""
        return tickets.note(text)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=os.environ.get("TICKETS_DB", "tickets.sqlite"))
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on this port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--drop-once", metavar="FILE", help="lose the first ticket call's answer (a test fault)"
    )
    args = parser.parse_args(argv)
    server = build_server(args.db, host=args.host, port=args.http or 8000, drop_once=args.drop_once)
    server.run(transport="streamable-http" if args.http else "stdio")


if __name__ == "__main__":
    main()
