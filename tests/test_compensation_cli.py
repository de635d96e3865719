"""The console: ``compensate`` (an operator's "it landed, undo it") and ``compensations``
(the undos and how they stand), against a real SQLite ledger, with the cancels counted
at a provider that keeps its own records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import State, cli
from langgraph_effects.core.compensation import undo_operation_id
from langgraph_effects.core.operation import Operation
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.sqlite import SqliteLedger
from tests.test_compensation import booked, cancels

EFFECTS = "tests.helpers.compensation_worker:cli_effects"


@pytest.fixture
def provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Provider:
    path = tmp_path / "provider.sqlite"
    monkeypatch.setenv("COMPENSATION_PROVIDER", str(path))
    return Provider(path, mode="dedup")


def seed(db: Path, provider: Provider, state: State) -> Operation:
    async def go() -> Operation:
        async with SqliteLedger.from_conn_string(db) as ledger:
            await ledger.setup()
            return await booked(ledger, provider, state)

    return asyncio.run(go())


def read(db: Path, op_id: str) -> Operation | None:
    async def go() -> Operation | None:
        async with SqliteLedger.from_conn_string(db) as ledger:
            return await ledger.get(op_id)

    return asyncio.run(go())


def console(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> tuple[int, Any]:
    code = cli.main(["--db", str(db), "--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def test_compensate_undoes_a_confirmed_effect_once(
    tmp_path: Path, provider: Provider, capsys: Any
) -> None:
    db = tmp_path / "ledger.sqlite"
    op = seed(db, provider, State.CONFIRMED)
    code, out = console(capsys, db, "compensate", op.op_id, "--effects", EFFECTS, "--reason", "refund")
    assert code == 0 and out["compensation"] == "undone" and out["undo"]["state"] == "confirmed"
    code, again = console(capsys, db, "compensate", op.op_id, "--effects", EFFECTS)
    assert code == 0 and again["verdict"] == "requested"
    assert cancels(provider) == 1
    code, listed = console(capsys, db, "compensations", "--all")
    assert code == 0
    [entry] = listed["compensations"]
    assert entry["operation"]["operation_id"] == op.op_id and entry["compensation"] == "undone"
    assert entry["operation"]["tool"] == "book" and entry["undo"]["compensates"] == op.op_id
    code, unfinished = console(capsys, db, "compensations")
    assert code == 0 and unfinished["compensations"] == []


def test_an_unknown_effect_goes_to_review_then_landed_and_undone(
    tmp_path: Path, provider: Provider, capsys: Any
) -> None:
    db = tmp_path / "ledger.sqlite"
    op = seed(db, provider, State.UNKNOWN)
    code, out = console(capsys, db, "compensate", op.op_id, "--effects", EFFECTS)
    assert code == 6 and out["undo"] is None and out["verdict"] == "review_first"
    assert cancels(provider) == 0
    in_review = read(db, op.op_id)
    assert in_review is not None and in_review.state is State.REVIEW
    assert read(db, undo_operation_id(op.op_id)) is None
    code, out = console(
        capsys,
        db,
        "compensate",
        op.op_id,
        "--effects",
        EFFECTS,
        "--landed",
        "--receipt",
        '{"id": "b1"}',
        "--expected-version",
        str(in_review.version),
    )
    assert code == 0 and out["compensation"] == "undone"
    assert cancels(provider) == 1
    stored = read(db, op.op_id)
    assert stored is not None and stored.state is State.CONFIRMED
    assert stored.compensated_by == undo_operation_id(op.op_id)


@pytest.mark.parametrize(
    ("state", "message"), [(State.FAILED, "nothing to undo"), (State.CONFIRMED, "declares no undo")]
)
def test_what_cannot_be_undone_is_refused_with_the_reason(
    tmp_path: Path,
    provider: Provider,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
    state: State,
    message: str,
) -> None:
    db = tmp_path / "ledger.sqlite"
    op = seed(db, provider, state)
    effects = EFFECTS if state is State.FAILED else "tests.test_compensation_cli:IRREVERSIBLE"
    code = cli.main(["--db", str(db), "compensate", op.op_id, "--effects", effects])
    err = capsys.readouterr().err
    assert code == 3 and message in " ".join(err.split())
    assert cancels(provider) == 0 and read(db, undo_operation_id(op.op_id)) is None


def test_a_bad_effects_target_is_a_usage_error(tmp_path: Path, provider: Provider, capsys: Any) -> None:
    db = tmp_path / "ledger.sqlite"
    op = seed(db, provider, State.CONFIRMED)
    code = cli.main(
        ["--db", str(db), "compensate", op.op_id, "--effects", "tests.test_compensation_cli:EFFECTS"]
    )
    assert code == 2 and "mapping of tool name -> Effect" in " ".join(capsys.readouterr().err.split())


def _irreversible() -> dict[str, Any]:
    from langgraph_effects import Effect

    return {"book": Effect(dedup_window=60)}


IRREVERSIBLE = _irreversible()
