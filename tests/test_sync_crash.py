"""Sync apps under real crashes: ``graph.invoke`` on ``EffectSqliteSaver`` and
``EffectPostgresSaver``. A worker process is SIGKILLed at a fault point, then the
thread is resumed by a fresh process; effects are counted at a provider that keeps
its own records in its own SQLite file. Two sync runners on one thread: the fence
lets one proceed and refuses the other."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import EffectPostgresSaver, EffectSqliteSaver, recover_sync
from langgraph_effects.lab.providers import Provider
from tests import test_fencing as fencing
from tests.helpers import run_python
from tests.helpers.agent import Spec, build, provider_for, spec_json
from tests.helpers.fencing_agent import FenceSpec, is_postgres
from tests.ledger import conftest as ledger_fixtures
from tests.test_recovery import clean_env

pytestmark = [pytest.mark.crash, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The checkpoint database: a SQLite file, or a Postgres DSN on a schema of its own."""
    if request.param == "sqlite":
        yield str(tmp_path / "agent.sqlite")
        return
    with ledger_fixtures.created_schema("lge_sync") as (_, dsn):
        yield dsn


def worker(spec: Spec, *, expect_kill: bool = False) -> dict[str, Any]:
    args = spec_json(replace(spec, sync=True))
    return run_python("-m", "tests.helpers.agent", args, expect_kill=expect_kill)


def effects(s: Spec) -> int:
    return sum(Provider(s.provider, s.provider_mode).count_effects().values())  # type: ignore[arg-type]


def requests(s: Spec) -> int:
    return Provider(s.provider, s.provider_mode).count_requests("apply")  # type: ignore[arg-type]


def tool_messages(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in out["messages"] if m["type"] == "tool"]


@pytest.mark.parametrize(("contract", "evidence", "sent"), [("dedup", "result", 2), ("lookup", "lookup", 1)])
def test_kill_after_the_effect_settles_on_resume(
    db: str, tmp_path: Path, contract: str, evidence: str, sent: int
) -> None:
    s = Spec(db=db, provider=str(tmp_path / "provider.sqlite"), contract=contract, provider_mode=contract)
    worker(replace(s, crash="before_outcome"), expect_kill=True)
    assert effects(s) == 1  # it landed; the worker died before recording it

    out = worker(replace(s, resume=True))
    assert out["interrupts"] == []
    [message] = tool_messages(out)
    assert message["status"] == "success"
    assert message["artifact"]["state"] == "confirmed" and message["artifact"]["evidence"] == evidence
    assert effects(s) == 1
    assert requests(s) == sent  # dedup: re-sent under the same key and replayed; lookup: never re-sent
    assert out["messages"][-1]["content"] == "done"


def test_kill_before_the_send_sends_once_on_resume(db: str, tmp_path: Path) -> None:
    s = Spec(db=db, provider=str(tmp_path / "provider.sqlite"), calls=2)
    worker(replace(s, crash="after_intent"), expect_kill=True)
    assert requests(s) == 0
    out = worker(replace(s, resume=True))
    assert [m["artifact"]["state"] for m in tool_messages(out)] == ["confirmed", "confirmed"]
    assert effects(s) == 2 and requests(s) == 2


def test_blind_kill_waits_for_the_operator_and_takes_the_verdict(db: str, tmp_path: Path) -> None:
    s = Spec(db=db, provider=str(tmp_path / "provider.sqlite"), contract="blind", provider_mode="blind")
    worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = worker(replace(s, resume=True))
    [pending] = out["interrupts"]
    [entry] = pending["value"]["operations"]
    assert entry["state"] == "review" and entry["evidence"]["kind"] == "blind"
    assert effects(s) == 1 and requests(s) == 1  # held for a human, not re-sent

    answer = {entry["operation_id"]: {"type": "landed", "receipt": {"ticket": "T-7"}}}
    out = worker(replace(s, answer=answer))
    assert out["interrupts"] == []
    [message] = tool_messages(out)
    assert message["artifact"]["evidence"] == "verdict"
    assert message["artifact"]["receipt"] == {"ticket": "T-7"}
    assert effects(s) == 1 and requests(s) == 1
    assert out["messages"][-1]["content"] == "done"


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_two_sync_runners_on_one_thread_one_is_refused(db: str, tmp_path: Path, durability: str) -> None:
    provider = str(tmp_path / "provider.sqlite")
    threads = ["t1"]
    common: dict[str, Any] = {"db": db, "provider": provider, "threads": threads, "sync": True}
    fencing.crash(FenceSpec(mode="crash", **common))
    # Both load the same checkpoint before either saves (overlap): they collide.
    runners = [
        FenceSpec(mode="resume", go=str(tmp_path / "go"), overlap=str(tmp_path / "overlap"),
                  durability=durability, durable_wait_seconds=fencing.DURABLE_WAIT, **common)
        for _ in range(2)
    ]
    results = fencing.race(runners, tmp_path / "go")
    assert sorted(fencing.outcomes(results, "t1")) == ["ok", "refused"], results
    refused = next(r["threads"]["t1"] for r in results if r["threads"]["t1"]["outcome"] == "refused")
    assert "another runner" in refused["error"]
    fencing.assert_exactly_intended(provider, threads, calls=2)
    assert asyncio.run(fencing.forks(db, threads)) == []  # no checkpoint with two children
    assert asyncio.run(fencing.unresolved(db)) == []


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The console in a fresh interpreter, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", *args],
        cwd=ROOT, capture_output=True, text=True, env=clean_env(), timeout=180,
    )


def test_the_console_resolves_what_a_sync_app_left_and_the_app_takes_the_verdict(tmp_path: Path) -> None:
    s = Spec(db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"),
             contract="blind", provider_mode="blind")
    worker(replace(s, crash="before_outcome"), expect_kill=True)
    listed = cli("list", "--db", s.db, "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)["operations"]
    assert row["state"] == "dispatched" and row["lease"] == "owner_dead"
    shown = cli("show", row["operation_id"], "--db", s.db, "--json")
    version = json.loads(shown.stdout)["operation"]["version"]
    resolved = cli("resolve", row["operation_id"], "--landed", "--receipt", '{"id": "r9"}',
                   "--expected-version", str(version), "--db", s.db, "--json")
    assert resolved.returncode == 0, resolved.stderr

    out = worker(replace(s, resume=True))  # the sync app's next run reads the verdict
    assert out["interrupts"] == []
    [message] = tool_messages(out)
    assert message["artifact"]["evidence"] == "verdict" and message["artifact"]["receipt"] == {"id": "r9"}
    assert effects(s) == 1 and requests(s) == 1


def test_recover_sync_resumes_a_crashed_sync_thread(db: str, tmp_path: Path) -> None:
    s = Spec(db=db, provider=str(tmp_path / "provider.sqlite"), calls=2)
    worker(replace(s, crash="before_outcome"), expect_kill=True)
    # The first call to land dies before its outcome is recorded; the second runs in
    # the tool thread pool beside it and may have been sent (and landed) by then.
    landed, sent = effects(s), requests(s)
    assert landed in (1, 2) and sent == landed

    kind = EffectPostgresSaver if is_postgres(db) else EffectSqliteSaver
    with kind.from_conn_string(db) as saver:
        saver.setup()
        graph = build(s, saver, provider_for(s))
        report = recover_sync(graph, min_idle=0)
        [thread] = report.threads
        assert thread.thread_id == "t1" and thread.action == "resumed"
        messages = graph.get_state({"configurable": {"thread_id": "t1"}}).values["messages"]
        assert [m.artifact["state"] for m in messages if m.type == "tool"] == ["confirmed", "confirmed"]
        assert recover_sync(graph, min_idle=0).threads == ()  # nothing left to do
    # Each call is sent once more at most: a landed one under its key (replayed by the
    # provider), the other for the first time; never a second effect.
    assert effects(s) == 2 and requests(s) == sent + 2
