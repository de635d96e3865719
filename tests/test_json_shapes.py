"""The JSON the operator surface prints is what ``docs/json.md`` publishes: real outputs
(``list --json``, ``show --json``, ``resolve --json``, ``compensate``/``compensations
--json``, an error, the ``effect_review`` and ``effect_approval`` interrupt values, a
recovery report) validate against the JSON Schemas generated from the typed dicts in
``_runtime/shapes.py``, whose objects are closed: a field added without its shape, or
one renamed, fails here. An operation's id is ``operation_id`` in every one of them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from langgraph_effects import AsyncEffectSqliteSaver, State, cli
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.operator import (
    SHAPES,
    json_schema,
    json_schemas,
    recover,
    resolve_report,
)
from tests.helpers.agent import build
from tests.test_approval import agent_with, ask
from tests.test_compensation import booked
from tests.test_review_hitl import CONFIG, blind_spec, paused_at_review

jsonschema = pytest.importorskip("jsonschema")

EFFECTS = "tests.helpers.compensation_worker:cli_effects"


def check(name: str, value: Any) -> Any:
    """Validate ``value`` (as it crosses the wire: through ``json``) against the
    published schema ``name``; the value, parsed."""
    wire = json.loads(json.dumps(value))
    jsonschema.Draft202012Validator(json_schema(name)).validate(wire)
    return wire


def console(capsys: pytest.CaptureFixture[str], db: str, *argv: str) -> tuple[int, Any]:
    """The console, in process, with ``--json``: its exit code and its stdout, parsed."""
    code = cli.main(["--db", db, "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def ids_named_op_id(value: Any) -> list[str]:
    """Where the retired name ``op_id`` still appears as a key, at any depth."""
    if isinstance(value, dict):
        return [k for k in value if k == "op_id"] + [p for v in value.values() for p in ids_named_op_id(v)]
    if isinstance(value, list):
        return [p for v in value for p in ids_named_op_id(v)]
    return []


def test_a_review_its_console_views_its_verdict_and_its_recovery_match_the_schemas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = blind_spec(tmp_path, "graph")
    provider = Provider(spec.provider, "blind")

    async def pause() -> Any:
        async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
            await saver.setup()
            _, pending = await paused_at_review(spec, saver, provider)
            return pending.value

    review = check("effect-review", asyncio.run(pause()))
    [entry] = review["operations"]
    op_id = entry["operation_id"]
    assert entry["state"] == "review" and provider.count_requests("apply") == 1

    code, listed = console(capsys, spec.db, "list")
    assert code == 0 and [op["operation_id"] for op in check("list", listed)["operations"]] == [op_id]
    code, shown = console(capsys, spec.db, "show", op_id)
    assert code == 0 and check("show", shown)["operation"]["operation_id"] == op_id
    assert [step["operation_id"] for step in shown["audit"]] == [op_id] * len(shown["audit"])
    version = shown["operation"]["version"]

    code, refused = console(capsys, spec.db, "resolve", op_id, "--not-landed", "--expected-version", "99")
    assert code == 3 and check("error", refused)["error"]["kind"] == "stale_version"
    assert refused["error"]["expected_version"] == 99 and refused["error"]["actual_version"] == version
    verdict = ("resolve", op_id, "--not-landed", "--expected-version")
    code, resolved = console(capsys, spec.db, *verdict, str(version))
    assert code == 0 and check("resolve", resolved)["operation"]["state"] == "pending"
    assert resolved["verdict"] == {"type": "not_landed"} and resolved["from_state"] == "review"

    async def recovered() -> Any:
        async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
            agent = build(spec, saver, provider)
            report = await recover(agent, ledger=saver.ledger, min_idle=0)
            return report.to_json()

    report = check("recover", asyncio.run(recovered()))
    [thread] = report["threads"]
    [operation] = thread["operations"]
    assert thread["action"] == "resumed" and operation["operation_id"] == op_id
    assert operation["before"]["state"] == "pending" and operation["after"]["state"] == "confirmed"
    moved = [(t["from_state"], t["to_state"]) for t in operation["transitions"]]
    assert moved[:1] == [("pending", "dispatched")]
    assert provider.count_requests("apply") == 2  # the one the crash hid, then the re-send
    for output in (review, listed, shown, refused, resolved, report):
        assert ids_named_op_id(output) == []


def test_an_approval_interrupt_matches_its_schema(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "p.sqlite", "blind")

    async def go() -> Any:
        async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "a.sqlite") as saver:
            await saver.setup()
            agent = agent_with(provider, saver, middleware=True)
            pending = await ask(agent)
            value = pending.value
            await agent.ainvoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), CONFIG)
            return value

    approval = check("effect-approval", asyncio.run(go()))
    assert approval["operations"][0]["operation_id"].startswith("op_")
    assert provider.count_requests("apply") == 1


def test_compensation_outputs_match_their_schemas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPENSATION_PROVIDER", str(tmp_path / "provider.sqlite"))
    provider = Provider(tmp_path / "provider.sqlite", mode="dedup")
    db = tmp_path / "ledger.sqlite"

    async def seed() -> Any:
        async with SqliteLedger.from_conn_string(db) as ledger:
            await ledger.setup()
            return await booked(ledger, provider, State.CONFIRMED)

    op = asyncio.run(seed())
    undo = ("compensate", op.op_id, "--effects", EFFECTS, "--reason", "refund")
    code, undone = console(capsys, str(db), *undo)
    assert code == 0 and check("compensate", undone)["operation"]["operation_id"] == op.op_id
    assert undone["undo"]["compensates"] == op.op_id and undone["compensation"] == "undone"
    code, listed = console(capsys, str(db), "compensations", "--all")
    [entry] = check("compensations", listed)["compensations"]
    assert code == 0 and entry["operation"]["operation_id"] == op.op_id
    assert entry["undo"]["operation_id"] == undone["undo"]["operation_id"]


async def test_resolve_report_to_json_is_what_the_console_prints(tmp_path: Path) -> None:
    """The Python API gives the console's shape: ``VerdictReport.to_json()`` is ``resolve --json``."""
    provider = Provider(tmp_path / "provider.sqlite", mode="dedup")
    async with SqliteLedger.from_conn_string(tmp_path / "ledger.sqlite") as ledger:
        await ledger.setup()
        op = await booked(ledger, provider, State.UNKNOWN)
        done = await resolve_report(ledger, op.op_id, {"type": "landed", "receipt": {"id": "r1"}},
                                    expected_version=op.version, actor="alice")
    out = check("resolve", done.to_json())
    assert out["verdict"] == {"type": "landed", "receipt": {"id": "r1"}}
    assert out["operation"]["state"] == "confirmed"


def test_the_schemas_are_closed_and_name_every_state() -> None:
    schemas = json_schemas()
    assert set(schemas) == set(SHAPES)
    operation = schemas["operation"]
    assert operation["additionalProperties"] is False and "operation_id" in operation["required"]
    assert set(operation["properties"]["state"]["enum"]) == {s.value for s in State}
    extra = json.loads(json.dumps({**_minimal_operation(), "op_id": "x"}))
    with pytest.raises(jsonschema.ValidationError, match="op_id"):
        jsonschema.Draft202012Validator(json_schema("operation")).validate(extra)
    with pytest.raises(ValueError, match="no JSON shape named 'nope'"):
        json_schema("nope")


def _minimal_operation() -> dict[str, Any]:
    """A valid operation, built from the schema's own required fields."""
    schema = json_schema("operation")
    samples = {"string": "s", "integer": 1, "number": 1.0, "boolean": False, "object": {}, "array": []}
    out: dict[str, Any] = {}
    for name in schema["required"]:
        prop = schema["properties"][name]
        if "enum" in prop:
            out[name] = prop["enum"][0]
        elif "type" in prop:
            out[name] = samples[prop["type"]]
        else:
            out[name] = None
    jsonschema.Draft202012Validator(schema).validate(out)
    return out
