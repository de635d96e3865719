"""One registry chooses the backend a ledger URL names (``open_ledger``, ``setup_database``,
the console's ``--db``): built-in schemes, registration, and what an unknown one is told."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_effects.errors import (
    ConfigurationError,
    LedgerNotFoundError,
    UnknownBackendError,
    UnsupportedByBackendError,
)
from langgraph_effects.ledger import registry
from langgraph_effects.ledger.kit import (
    open_checkpointer,
    open_ledger,
    register_backend,
    registered_schemes,
    setup_database,
    unregister_backend,
)
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.registry import describe_target, is_postgres_dsn, redact
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.testing.conformance import make_op


def test_each_url_form_names_its_backend(tmp_path: Path) -> None:
    chosen = {
        "/var/lib/agent.db": "sqlite",
        "agent.db": "sqlite",
        ":memory:": "sqlite",
        "sqlite:///var/lib/agent.db": "sqlite",
        "SQLite:agent.db": "sqlite",
        "postgresql://u@h/db": "postgresql",
        "postgres://u@h/db": "postgresql",
        "host=127.0.0.1 dbname=app": "postgresql",
        "memory://": "memory",
    }
    assert {url: registry.backend_for(url).scheme for url in chosen} == chosen
    assert [is_postgres_dsn(url) for url in chosen] == [v == "postgresql" for v in chosen.values()]
    assert {"memory", "postgres", "postgresql", "sqlite"} <= set(registered_schemes())


async def test_sqlite_urls_open_the_file_they_name(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    where = await setup_database(f"sqlite://{path}")
    assert where == f"sqlite:{path}" and path.exists()
    [stored] = await _record(f"sqlite://{path}")
    async with open_ledger(str(path)) as plain, open_ledger(f"sqlite:{path}") as short:
        assert isinstance(plain, SqliteLedger)
        assert await plain.get(stored.op_id) == stored == await short.get(stored.op_id)


async def _record(url: str) -> list:  # type: ignore[type-arg]
    async with open_ledger(url) as ledger:
        return await ledger.record_intents([make_op()])


async def test_memory_scheme_opens_a_fresh_set_up_ledger_each_time() -> None:
    async with open_ledger("memory://") as first:
        assert isinstance(first, InMemoryLedger)
        assert await first.schema_version() == InMemoryLedger.SCHEMA_VERSION
        [op] = await first.record_intents([make_op()])
        async with open_ledger("memory://") as second:
            assert await second.get(op.op_id) is None
    no_saver = "memory ledger backend offers no checkpointer"
    with pytest.raises(UnsupportedByBackendError, match=no_saver) as caught:
        async with open_checkpointer("memory://"):
            pass
    assert (caught.value.scheme, caught.value.feature) == ("memory", "checkpointer")
    assert describe_target("memory://").startswith("a fresh in-memory ledger")


async def test_an_unknown_scheme_says_what_is_known_and_how_to_register() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        async with open_ledger("redis://user:s3cret@cache:6379/0"):
            pass
    error = caught.value
    assert isinstance(error, ConfigurationError) and isinstance(error, ValueError)
    assert error.scheme == "redis" and "s3cret" not in str(error) and "***" in error.url
    assert {"sqlite", "postgresql", "memory"} <= set(error.known)
    assert "register_backend('redis', factory)" in str(error)
    assert redact("redis://user:s3cret@cache:6379/0") == "redis://user:***@cache:6379/0"


async def test_a_registered_scheme_is_opened_and_set_up_through_its_factory() -> None:
    stores: dict[str, InMemoryLedger] = {}
    asked: list[registry.LedgerOptions] = []

    def factory(url: str, options: registry.LedgerOptions) -> InMemoryLedger:
        asked.append(options)
        return stores.setdefault(url, InMemoryLedger())

    register_backend("mine", factory)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_backend("mine", factory)
        with pytest.raises(LedgerNotFoundError, match="'mine://y' holds no langgraph-effects ledger"):
            async with open_ledger("mine://y"):  # never set up: refused, not answered empty
                pass
        assert await setup_database("mine://x") == "memory"  # the default: the ledger's setup()
        async with open_ledger("mine://x", read_only=True) as opened:
            assert opened is stores["mine://x"]
        assert [(o.create, o.read_only) for o in asked] == [(False, False), (True, False), (False, True)]
        with pytest.raises(ValueError, match="a schema applies to a Postgres ledger only"):
            async with open_ledger("mine://x", schema="s"):
                pass
    finally:
        unregister_backend("mine")
    with pytest.raises(UnknownBackendError):
        registry.backend_for("mine://x")


def test_the_console_refuses_an_unknown_scheme_as_bad_input(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", "--db", "redis://cache/0", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "no ledger backend is registered for the scheme 'redis'" in done.stderr


def test_importing_the_package_does_not_import_pytest() -> None:
    code = (
        "import sys, langgraph_effects, langgraph_effects.testing, langgraph_effects.ledger.kit; "
        "assert 'pytest' not in sys.modules, 'pytest imported'; "
        "import langgraph_effects.testing.conformance; assert 'pytest' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
