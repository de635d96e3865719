"""What a ledger backend is: the options it is opened with, its factory and hooks
(`Backend`), and what every backend's factory may share: the schema version check
(`check_schema`) and a URL's password starred out (`redact_url`).

The registry (`registry`) maps URL schemes to these; the built-in backends
(`builtin`) and other packages' backends are written against them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import LedgerNotFoundError, SchemaBehindError, SchemaTooNewError
from .base import Ledger


@dataclass(frozen=True)
class LedgerOptions:
    """How to open a ledger, as a backend's factory receives it."""

    read_only: bool = False
    """Nothing may be written (what the console's ``list``/``show`` ask for)."""
    schema: str | None = None
    """Where the tables live, for a backend with `Backend.schemas`."""
    connect_timeout: float | None = None
    """Seconds to wait for a connection or a lock (``None``: the backend's default)."""
    create: bool = False
    """``True`` (what `setup_database` asks): create the store if it is missing.
    ``False``: a store that does not exist is refused
    ([`LedgerNotFoundError`][langgraph_effects.errors.LedgerNotFoundError]), never created."""


OpenLedger = Callable[[str, LedgerOptions], "AbstractAsyncContextManager[Ledger] | Ledger"]
"""A backend's factory: the URL as given and the options -> the ledger, or an async
context manager yielding it (closed on exit; a bare ledger is closed with ``aclose()``)."""


@dataclass(frozen=True)
class Backend:
    """A ledger backend as the registry knows it: its scheme, its factory, and optional hooks."""

    scheme: str
    open: OpenLedger
    schemas: bool = False
    """Whether `LedgerOptions.schema` applies (Postgres); else giving one is refused."""
    remote: bool = False
    """A server over the network (messages speak of connecting, not of a file)."""
    describe: Callable[[str, str | None], str] | None = None
    """Where a URL points, for a "connecting to ..." line (never a password)."""
    redact: Callable[[str], str] | None = None
    """The URL safe to print; by default a URL's password is starred out."""
    matches: Callable[[str], bool] | None = None
    """Also claim URLs without this scheme (libpq's ``host=... dbname=...`` for Postgres)."""
    checkpointer: Callable[[str, LedgerOptions], AbstractAsyncContextManager[Any]] | None = None
    """An effect-aware LangGraph checkpointer on the same store (not set up yet)."""
    setup: Callable[[str, LedgerOptions], Awaitable[str]] | None = None
    """Create or migrate everything the store needs; returns where the ledger is. By
    default: open with ``create=True`` and run the ledger's ``setup()``."""
    aliases: tuple[str, ...] = field(default=())
    """Other schemes naming the same backend (``postgres`` for ``postgresql``)."""


def redact_url(url: str) -> str:
    """``url`` with its password (``scheme://user:password@host``) starred out."""
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:
        return url.split("://", 1)[0] + "://***"


async def check_schema(
    ledger: Ledger, name: str, *, schema: str | None = None, backend: str = "sqlite"
) -> None:
    """Refuse a store without a ledger, or with one at another schema version than the
    ledger's `SCHEMA_VERSION` (reads only)."""
    found = await ledger.schema_version()
    expected = ledger.SCHEMA_VERSION
    if found is None:
        postgres = backend == "postgresql"
        raise LedgerNotFoundError(name, empty=True, postgres=postgres, schema=schema, backend=backend)
    if found > expected:
        raise SchemaTooNewError(found, expected, ledger.where)
    if found < expected:
        raise SchemaBehindError(found, expected, ledger.where)
