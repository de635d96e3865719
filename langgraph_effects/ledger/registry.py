"""Which backend a ledger URL names, and opening it: one registry of schemes.

``sqlite:///path`` (or a plain path), ``postgresql://...`` (or libpq's
``host=... dbname=...``) and ``memory://`` are built in (`builtin`); a new
backend registers its own scheme with `register_backend`, or from another
package through the ``langgraph_effects.backends`` entry-point group (each entry
point names a `Backend`, loaded the first time a URL is resolved).
`backend_for` is the one place a URL is looked at to choose a backend.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.metadata import entry_points
from typing import Any

from ..errors import UnknownBackendError, UnsupportedByBackendError
from .backend import Backend, LedgerOptions, OpenLedger, check_schema, redact_url
from .base import Ledger
from .builtin import BUILTIN_BACKENDS

#: The entry-point group other packages register backends in (each names a `Backend`).
ENTRY_POINT_GROUP = "langgraph_effects.backends"

#: Seconds the console waits for a connection (Postgres) or a write lock (SQLite).
DEFAULT_CONNECT_TIMEOUT = 5.0

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


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
    for builtin in BUILTIN_BACKENDS:
        register_backend(builtin.scheme, builtin)

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


def is_postgres_dsn(db: str) -> bool:
    """Whether ``db`` names a Postgres database.

    A URL (``postgres://`` or ``postgresql://``) or a libpq key/value string
    (``host=127.0.0.1 port=5432 dbname=app``).
    """
    try:
        return backend_for(db).scheme == "postgresql"
    except UnknownBackendError:
        return False


def has_password(db: str) -> bool:
    """Whether ``db`` carries a password (so it must not be printed as is)."""
    return redact(db) != db


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "ENTRY_POINT_GROUP",
    "backend_for",
    "describe_target",
    "has_password",
    "is_postgres_dsn",
    "open_checkpointer",
    "open_ledger",
    "redact",
    "register_backend",
    "registered_schemes",
    "setup_database",
    "unregister_backend",
]
