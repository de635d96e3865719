"""Library errors speak the API; the console words the same facts with its commands.

Each error is raised the way the package raises it (the ledger, ``operator.resolve``,
``open_ledger``), then its ``str()`` is checked for console syntax and its attributes
and the console's message (``langgraph_effects.cli.failures.console_message``) for
what an operator needs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from langgraph_effects._runtime.operator import resolve
from langgraph_effects.cli.failures import console_message
from langgraph_effects.errors import (
    LeaseLiveError,
    LedgerNotFoundError,
    SchemaBehindError,
    StaleVersionError,
)
from langgraph_effects.ledger.registry import open_ledger
from langgraph_effects.ledger.sqlite import SqliteLedger

from .test_operator import make_op, new_ledger_file, seed

CONSOLE_SYNTAX = (
    "--db",
    "--expected-version",
    "--schema",
    "langgraph-effects show",
    "langgraph-effects --db",
)


def api_only(error: BaseException) -> str:
    text = str(error)
    for token in CONSOLE_SYNTAX:
        assert token not in text, (token, text)
    return text


def test_stale_version_and_live_lease(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"

    async def go() -> tuple[StaleVersionError, LeaseLiveError, str, str]:
        await new_ledger_file(path)
        async with SqliteLedger.from_conn_string(path) as ledger:
            await ledger.setup()
            review = await seed(ledger, make_op(), "review")
            live = await seed(ledger, make_op(), "dispatched", lease_seconds=600)
            with pytest.raises(StaleVersionError) as stale:
                await resolve(ledger, review.op_id, {"type": "not_landed"}, expected_version=1, actor="a")
            with pytest.raises(LeaseLiveError) as leased:
                await resolve(
                    ledger, live.op_id, {"type": "not_landed"}, expected_version=live.version, actor="a"
                )
            stored = await ledger.get(review.op_id)
            assert stored is not None and stored.version == review.version  # nothing written
            return stale.value, leased.value, review.op_id, live.op_id

    stale, leased, review_id, live_id = asyncio.run(go())
    assert (stale.op_id, stale.expected, stale.actual) == (review_id, 1, 3)
    assert "Read it again" in api_only(stale) and "version 3, not 1" in str(stale)
    assert console_message(stale) == (
        f"operation {review_id} is at version 3, not 1: it changed since you read it. Read it again "
        "(`langgraph-effects show`) and decide on what it is now."
    )
    assert leased.op_id == live_id and leased.remaining is not None and 0 < leased.remaining <= 600
    assert "being sent right now" in api_only(leased)
    assert console_message(leased).endswith("then `langgraph-effects show` it again.")


def test_ledger_not_found_and_schema_behind(tmp_path: Path) -> None:
    missing = tmp_path / "typo.sqlite"

    async def go() -> LedgerNotFoundError:
        with pytest.raises(LedgerNotFoundError) as caught:
            async with open_ledger(str(missing)):
                pass
        return caught.value

    error = asyncio.run(go())
    assert (error.path, error.empty, error.postgres) == (str(missing), False, False)
    assert "does not exist" in api_only(error) and "Nothing was created" in str(error)
    assert "Check the path given with --db (or LANGGRAPH_EFFECTS_DB)" in console_message(error)
    assert not missing.exists()

    behind = SchemaBehindError(1, 2, "SQLite file x.sqlite")
    assert (behind.found, behind.needed, behind.where) == (1, 2, "SQLite file x.sqlite")
    assert "setup()" in api_only(behind)
    assert "`langgraph-effects --db ... setup`" in console_message(behind)
