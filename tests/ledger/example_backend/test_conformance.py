"""The shipped conformance suite against the example backend (written only against the
public kit), opened through the registry by its own URL scheme."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from langgraph_effects.errors import LedgerNotFoundError
from langgraph_effects.ledger.kit import Ledger, open_ledger, setup_database
from langgraph_effects.testing.conformance import LedgerConformance, dispatch, make_op

from . import JsonFileLedger, register, unregister


@pytest.fixture(autouse=True)
def jsonfile_scheme() -> Iterator[None]:
    register()
    yield
    unregister()


class TestJsonFileLedger(LedgerConformance):
    @pytest.fixture
    async def ledger(self, tmp_path: Path) -> AsyncIterator[Ledger]:
        url = f"jsonfile://{tmp_path / 'ledger.json'}"
        assert await setup_database(url) == f"jsonfile:{tmp_path / 'ledger.json'}"
        async with open_ledger(url) as ledger:
            assert isinstance(ledger, JsonFileLedger)
            yield ledger


async def test_what_it_committed_is_in_the_file_and_read_by_a_new_instance(tmp_path: Path) -> None:
    url = f"jsonfile://{tmp_path / 'ledger.json'}"
    await setup_database(url)
    op = make_op()
    async with open_ledger(url) as first:
        [stored] = await first.record_intents([op], change=dispatch())
    on_disk = json.loads((tmp_path / "ledger.json").read_text())
    assert list(on_disk["ops"]) == [op.op_id] and on_disk["migrations"] == 1
    async with open_ledger(url) as second:
        assert await second.get(op.op_id) == stored
        assert [e.event for e in await second.audit(op.op_id)] == ["intent"]


async def test_opening_a_missing_file_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.json"
    with pytest.raises(LedgerNotFoundError, match="holds no langgraph-effects ledger"):
        async with open_ledger(f"jsonfile://{missing}"):
            pass
    assert not missing.exists()
