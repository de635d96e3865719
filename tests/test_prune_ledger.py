"""Pruning checkpoints leaves the ledger whole: an operation a crash left unresolved on a
pruned thread is still listed by the console and found by recovery.

A real worker (``python -m tests.helpers.recovery_agent``) is SIGKILLed after its
effect landed and before the outcome was recorded; its thread is then pruned with
``EffectPostgresSaver.prune`` (``keep_latest``) or ``AsyncEffectPostgresSaver.aprune``
(``delete``); the console and recovery run as an operator runs them, in fresh
interpreters. The provider keeps its own records.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
from langgraph_effects.checkpoint.sync import EffectPostgresSaver
from langgraph_effects.lab.providers import Provider
from tests.helpers.recovery_agent import SPEC_ENV, RecoverySpec, spec_json
from tests.ledger.conftest import require_postgres

pytestmark = [pytest.mark.postgres, pytest.mark.crash, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
FACTORY = "tests.helpers.recovery_agent:make_graph"


@pytest.fixture
def dsn() -> Iterator[str]:
    """A URL DSN (the console recognises Postgres by its scheme) on a schema of its own."""
    import psycopg

    base = require_postgres()
    if not base.startswith(("postgres://", "postgresql://")):
        pytest.skip("the console recognises a Postgres DSN by its URL scheme")
    schema = f"lge_prune_{os.getpid()}_{os.urandom(4).hex()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield base + ("&" if "?" in base else "?") + f"options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def env(s: RecoverySpec | None = None) -> dict[str, str]:
    drop = {"LANGGRAPH_EFFECTS_DB", "LANGGRAPH_EFFECTS_HOST", "COLUMNS", SPEC_ENV}
    out = {k: v for k, v in os.environ.items() if k not in drop}
    if s is not None:
        out[SPEC_ENV] = spec_json(s)
    return out


def crashed_thread(tmp_path: Path, dsn: str, thread: str) -> RecoverySpec:
    """A thread whose worker was SIGKILLed after the send, before the outcome was recorded."""
    s = RecoverySpec(
        db=dsn, provider=str(tmp_path / "provider.sqlite"), contract="dedup", provider_mode="dedup",
        thread=thread,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.recovery_agent", spec_json(replace(s, crash="before_outcome"))],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env(),
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])
    return s


def cli(*args: str, s: RecoverySpec | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", *args],
        cwd=ROOT, capture_output=True, text=True, env=env(s), timeout=180,
    )


def listed(dsn: str, thread: str) -> list[dict[str, Any]]:
    """``langgraph-effects list --thread`` (unresolved operations), as JSON."""
    done = cli("--db", dsn, "--json", "list", "--thread", thread)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)["operations"]
    return rows


async def checkpoints(dsn: str, thread: str) -> int:
    async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
        return len([c async for c in saver.alist({"configurable": {"thread_id": thread}})])


def effects(s: RecoverySpec) -> dict[str, int]:
    return Provider(s.provider, "dedup").count_effects()


def test_an_unresolved_operation_of_a_pruned_thread_is_listed_and_recovered(tmp_path: Path, dsn: str) -> None:
    async def setup() -> None:
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()

    asyncio.run(setup())
    s = crashed_thread(tmp_path, dsn, "kept")
    [before] = listed(dsn, "kept")
    assert before["state"] == "dispatched"
    assert asyncio.run(checkpoints(dsn, "kept")) > 1
    assert effects(s) == {"kept:0": 1}

    with EffectPostgresSaver.from_conn_string(dsn) as saver:
        saver.prune(["kept"], strategy="keep_latest")
    assert asyncio.run(checkpoints(dsn, "kept")) == 1
    [after] = listed(dsn, "kept")
    assert (after["operation_id"], after["state"]) == (before["operation_id"], "dispatched")

    # The latest checkpoint (with its pending writes) is all a resume needs: settled by
    # the dedup key, the provider's one effect replayed, nothing sent twice.
    done = cli("--db", dsn, "recover", "--graph", FACTORY, "--json", s=s)
    assert done.returncode == 0, done.stderr
    [thread] = json.loads(done.stdout)["threads"]
    assert (thread["thread_id"], thread["action"], thread["outcome"]) == ("kept", "resumed", "completed")
    assert [op["how"] for op in thread["operations"]] == ["settled_by_dedup"]
    assert effects(s) == {"kept:0": 1}
    assert listed(dsn, "kept") == []


def test_an_unresolved_operation_of_a_deleted_thread_is_listed_and_reported(tmp_path: Path, dsn: str) -> None:
    async def setup_and_crash() -> None:
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()

    asyncio.run(setup_and_crash())
    s = crashed_thread(tmp_path, dsn, "gone")
    [before] = listed(dsn, "gone")

    async def prune() -> None:
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.aprune(["gone"], strategy="delete")

    asyncio.run(prune())
    assert asyncio.run(checkpoints(dsn, "gone")) == 0
    [after] = listed(dsn, "gone")
    assert (after["operation_id"], after["state"]) == (before["operation_id"], "dispatched")

    # No checkpoint is left to resume: recovery names the operation for an operator's verdict.
    done = cli("--db", dsn, "recover", "--graph", FACTORY, "--json", s=s)
    report = json.loads(done.stdout)
    [thread] = report["threads"]
    assert (thread["thread_id"], thread["action"]) == ("gone", "not_resumable"), done.stdout
    assert "no checkpoint" in thread["reason"]
    assert [op["operation_id"] for op in thread["operations"]] == [before["operation_id"]]
    assert effects(s) == {"gone:0": 1}  # nothing was sent again
