"""Which backend a ledger URL names, and opening it: one registry of schemes.

``sqlite:///path`` (or a plain path), ``postgresql://...`` (or libpq's
``host=... dbname=...``) and ``memory://`` are registered by `opener`; a new
backend registers its own scheme with `register_backend`, or from another
package through the ``langgraph_effects.backends`` entry-point group (each entry
point names a `Backend`, loaded the first time a URL is resolved).
`backend_for` is the one place a URL is looked at to choose a backend.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import (
    LedgerNotFoundError,
    SchemaBehindError,
    SchemaTooNewError,
    UnknownBackendError,
    UnsupportedByBackendError,
)
from .base import Ledger

#: The entry-point group other packages register backends in (each names a `Backend`).
ENTRY_POINT_GROUP = "langgraph_effects.backends"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


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


_BACKENDS: dict[str, Backend] = {}
_LOADED = False


def register_backend(
    scheme: str, open: OpenLedger | Backend | None = None, *, replace: bool = False, **hooks: Any
) -> Backend:
    """Register the backend for ``scheme`` (``"myscheme"`` answers ``myscheme://...``).

    ``open(url, options)`` builds the ledger (see `OpenLedger`); ``hooks`` are
    the other fields of `Backend`. A `Backend` may be passed instead of
    ``open``. Registering a scheme twice is refused unless ``replace``. Returns the
    `Backend` registered.
    """
    if open is None:
        raise TypeError("register_backend needs the backend's factory: open(url, options) -> Ledger")
    backend = open if isinstance(open, Backend) else Backend(scheme=scheme.lower(), open=open, **hooks)
    names = [scheme.lower(), *backend.aliases]
    for name in names:
        if not _SCHEME.match(name + ":"):
            raise ValueError(f"{name!r} is not a URL scheme (letters, digits, + - . ; two or more)")
        taken = _BACKENDS.get(name)
        if taken is not None and taken is not backend and not replace:
            raise ValueError(
                f"the scheme {name!r} is already registered ({taken.open!r}); pass replace=True "
                "to replace it, or choose another scheme."
            )
    for name in names:
        _BACKENDS[name] = backend
    return backend


def unregister_backend(scheme: str) -> None:
    """Forget ``scheme`` (and its aliases), e.g. at the end of a test."""
    backend = _BACKENDS.pop(scheme.lower(), None)
    for alias in backend.aliases if backend is not None else ():
        _BACKENDS.pop(alias, None)


def registered_schemes() -> list[str]:
    """Every scheme a backend is registered for, sorted."""
    _load()
    return sorted(_BACKENDS)


def _load() -> None:
    """Register the built-in backends, then those of the entry-point group (once)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import opener  # noqa: F401  (registers sqlite, postgresql, memory)

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        loaded = entry.load()
        if isinstance(loaded, Backend) and loaded.scheme not in _BACKENDS:
            register_backend(loaded.scheme, loaded)


def backend_for(url: str) -> Backend:
    """The backend ``url`` names: its scheme's, one that claims it, else SQLite (a path).

    Raises [`UnknownBackendError`][langgraph_effects.errors.UnknownBackendError] for ``scheme://...`` with no
    backend registered.
    """
    _load()
    found = _SCHEME.match(url)
    if found is not None and found.group(1).lower() in _BACKENDS:
        return _BACKENDS[found.group(1).lower()]
    for backend in dict.fromkeys(_BACKENDS.values()):
        if backend.matches is not None and backend.matches(url):
            return backend
    if found is not None and url[found.end() :].startswith("//"):
        raise UnknownBackendError(found.group(1), redact_url(url), sorted(_BACKENDS))
    return _BACKENDS["sqlite"]


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


def _options(backend: Backend, options: LedgerOptions) -> LedgerOptions:
    if options.schema is not None and not backend.schemas:
        raise ValueError(
            f"a schema applies to a Postgres ledger only; a {backend.scheme} ledger has none "
            "(drop --schema, or give a postgresql:// DSN)."
        )
    return options


async def _enter(stack: AsyncExitStack, made: AbstractAsyncContextManager[Ledger] | Ledger) -> Ledger:
    if isinstance(made, Ledger):
        stack.push_async_callback(made.aclose)
        return made
    return await stack.enter_async_context(made)


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


@asynccontextmanager
async def open_ledger(
    db: str,
    *,
    read_only: bool = False,
    schema: str | None = None,
    connect_timeout: float | None = None,
) -> AsyncIterator[Ledger]:
    """Open the ledger named by ``db`` (which must hold one), and close it afterwards.

    ``db`` is a URL of a registered scheme (``sqlite:///path`` or a plain path,
    ``postgresql://...`` or ``host=... dbname=...`` with the ``postgres`` extra,
    ``memory://`` for a throw-away one, or a scheme of `register_backend`),
    with the ledger's tables in ``schema`` if given (Postgres).

    Nothing is ever created or migrated here (that is ``setup()``'s job, or
    ``langgraph-effects setup``): a store without a ledger is refused with
    [`LedgerNotFoundError`][langgraph_effects.errors.LedgerNotFoundError] rather than
    answered with "nothing unresolved", so
    an operator who mistypes a path or a database name is told so. A ledger at an
    older or newer schema version is refused too. ``read_only`` opens it so that
    nothing can be written (what ``list``/``show`` use). ``connect_timeout``
    (seconds) bounds connecting, or waiting for SQLite's write lock. Raises
    [`LedgerError`][langgraph_effects.errors.LedgerError] subclasses when the store cannot
    be used, [`UnknownBackendError`][langgraph_effects.errors.UnknownBackendError] for a scheme
    nobody registered.
    """
    backend = backend_for(db)
    options = _options(backend, LedgerOptions(read_only, schema, connect_timeout))
    async with AsyncExitStack() as stack:
        ledger = await _enter(stack, backend.open(db, options))
        await check_schema(ledger, redact(db), schema=schema, backend=backend.scheme)
        yield ledger


async def setup_database(db: str, *, schema: str | None = None, connect_timeout: float | None = None) -> str:
    """Create or migrate the ledger (and the checkpoint tables of a backend that has a
    checkpointer) in ``db``; what ``langgraph-effects setup`` runs. Returns where the
    ledger is, for messages."""
    backend = backend_for(db)
    options = _options(backend, LedgerOptions(schema=schema, connect_timeout=connect_timeout, create=True))
    if backend.setup is not None:
        return await backend.setup(db, options)
    async with AsyncExitStack() as stack:
        ledger = await _enter(stack, backend.open(db, options))
        await ledger.setup()
        return ledger.where


@asynccontextmanager
async def open_checkpointer(
    db: str, *, schema: str | None = None, connect_timeout: float | None = None
) -> AsyncIterator[Any]:
    """The effect-aware checkpointer of ``db``'s backend (``AsyncEffectSqliteSaver``,
    ``AsyncEffectPostgresSaver``), not set up; its ``.ledger`` is the ledger."""
    backend = backend_for(db)
    if backend.checkpointer is None:
        raise UnsupportedByBackendError(backend.scheme, "checkpointer")
    options = _options(backend, LedgerOptions(schema=schema, connect_timeout=connect_timeout))
    async with backend.checkpointer(db, options) as saver:
        yield saver


def describe_target(db: str, *, schema: str | None = None) -> str:
    """Where ``db`` points, for a "connecting to ..." line: never the password."""
    backend = backend_for(db)
    if backend.describe is not None:
        return backend.describe(db, schema)
    return f"{backend.scheme} ledger {redact(db)}"


def redact(db: str) -> str:
    """``db`` safe to print: a password is replaced by ``***``."""
    try:
        backend = backend_for(db)
    except UnknownBackendError:
        return redact_url(db)
    return (backend.redact or redact_url)(db)
