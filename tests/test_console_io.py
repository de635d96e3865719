"""The console against real databases: reading never writes, failing fast, runnable hints.

Every case runs the real console in a fresh interpreter (``python -m
langgraph_effects.cli``) against real SQLite files and the real Postgres server, and
checks the database's own catalog afterwards, not the console's word.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from langgraph_effects.core import exitcodes
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger

from .ledger.conftest import require_postgres
from .test_cli import DONE, REVIEW, Ledgerfile, run
from .test_operator import make_op, seeded_ledger_file

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # the console as a subprocess


def _with_db(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name`` (same server and user)."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def _user_tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    return {r[0] for r in rows}


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
    return {r[0] for r in rows}


@pytest.fixture
def fresh_pg() -> Iterator[str]:
    """A brand-new, empty Postgres database (libpq key=value DSN), dropped afterwards."""
    admin = require_postgres()
    name = f"lge_console_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_db(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def ledgerfile(tmp_path: Path) -> Ledgerfile:
    """A ledger file with one operation in review and one confirmed."""
    path = tmp_path / "agent.sqlite"
    seeded_ledger_file(
        path,
        (make_op(REVIEW, thread_id="thread-a"), "review"),
        (make_op(DONE, thread_id="thread-a"), "confirmed"),
    )
    return Ledgerfile(path)


# -- reading never writes -----------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_without_a_ledger_exits_4_and_creates_nothing(fresh_pg: str) -> None:
    assert fresh_pg.startswith(("host=", "dbname=", "user=", "port="))  # libpq key=value form
    before_tables, before_schemas = _user_tables(fresh_pg), _schemas(fresh_pg)
    for args in (
        ("list",),
        ("list", "--schema", "ledger"),
        ("show", REVIEW),
        ("resolve", REVIEW, "--not-landed", "--expected-version", "1"),
    ):
        done = run("--db", fresh_pg, *args, "--json")
        assert done.returncode == 4, (args, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["kind"] == "ledger_not_found"
        assert "holds no langgraph-effects ledger" in error["message"]
        assert "Postgres" in done.stderr  # the line saying where it connects
    assert _user_tables(fresh_pg) == before_tables == set()
    assert _schemas(fresh_pg) == before_schemas  # --schema ledger was not created either


@pytest.mark.postgres
def test_setup_then_read_with_schema_and_a_key_value_dsn(fresh_pg: str) -> None:
    made = run("--db", fresh_pg, "setup", "--schema", "ops_ledger")
    assert made.returncode == 0, made.stderr
    tables = _user_tables(fresh_pg)
    assert {"ops_ledger.effect_operations", "ops_ledger.effect_migrations"} <= tables
    assert "public.checkpoints" in tables  # LangGraph's own, beside it
    listed = run("--db", fresh_pg, "--schema", "ops_ledger", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["count"] == 0
    # Without --schema the ledger is not where the search_path looks: refused, not "none".
    elsewhere = run("--db", fresh_pg, "list")
    assert elsewhere.returncode == 4
    assert "setup" in elsewhere.stderr and "--schema" in elsewhere.stderr


@pytest.mark.postgres
def test_postgres_reads_are_read_only_transactions(fresh_pg: str) -> None:
    async def go() -> None:
        async with PostgresLedger.from_conn_string(fresh_pg) as ledger:
            await ledger.setup()
        async with PostgresLedger.from_conn_string(fresh_pg, read_only=True) as reader:
            assert await reader.schema_version() is not None
            with pytest.raises(Exception, match="read-only"):
                await reader.record_intents([make_op("op_" + "1" * 32)])
            with pytest.raises(Exception, match="read-only"):
                await reader.setup()

    asyncio.run(go())
    with psycopg.connect(fresh_pg) as conn:
        assert conn.execute("SELECT count(*) FROM effect_operations").fetchone() == (0,)


def test_sqlite_without_a_ledger_every_command_exits_4(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    for args in (
        ("show", REVIEW),
        ("resolve", REVIEW, "--not-landed", "--expected-version", "1"),
        ("recover", "--graph", "tests.helpers.recovery_agent:make_graph"),
    ):
        done = run("--db", str(other), *args)
        assert done.returncode == 4, (args, done.stderr)
        # The hint is a command that works as printed.
        assert f"langgraph-effects --db {shlex.quote(str(other))} setup" in done.stderr
    with sqlite3.connect(other) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert names == {"customers"}
    assert mode == "delete"  # not even switched to WAL


def test_list_answers_while_another_process_holds_the_write_lock(ledgerfile: Ledgerfile) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"db = sqlite3.connect({str(ledgerfile.path)!r}, isolation_level=None)\n"
            "db.execute('BEGIN IMMEDIATE')\n"
            "db.execute(\"UPDATE effect_operations SET attempts = attempts + 100\")\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n"
            "db.execute('ROLLBACK')\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        listed = run("--db", str(ledgerfile.path), "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["count"] == 1  # the committed row, untouched
        shown = run("--db", str(ledgerfile.path), "show", REVIEW, "--json")
        assert shown.returncode == 0, shown.stderr
        # A write waits only --connect-timeout for the lock, then says so (nothing written).
        before = ledgerfile_read(ledgerfile)
        refused = run(
            "--db", str(ledgerfile.path), "--connect-timeout", "1",
            "resolve", REVIEW, "--not-landed", "--expected-version", "3",
        )
        assert refused.returncode == 4, refused.stderr
        assert "locked" in refused.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    assert ledgerfile_read(ledgerfile) == before


def ledgerfile_read(ledgerfile: Ledgerfile) -> tuple[object, int]:
    """The stored REVIEW operation and its audit length, read without taking any lock."""

    async def go() -> tuple[object, int]:
        async with SqliteLedger.from_conn_string(ledgerfile.path, read_only=True) as ledger:
            return await ledger.get(REVIEW), len(await ledger.audit(REVIEW))

    return asyncio.run(go())


# -- failing fast ---------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_closed_port_fails_within_10_seconds() -> None:
    port = _closed_port()
    dsn = f"postgresql://nobody:hunter2@127.0.0.1:{port}/ledger"
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_effects.cli", "--db", dsn, "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "LANGGRAPH_EFFECTS_DB"},
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # printed before connecting: interpreter start-up excluded
    started = time.monotonic()
    assert f"127.0.0.1:{port}/ledger" in first and "connect timeout 5s" in first
    code = proc.wait(timeout=60)
    elapsed = time.monotonic() - started
    rest = proc.stderr.read()
    assert code == 4
    assert elapsed < 10, f"took {elapsed:.1f}s to give up on a closed port"
    assert "Connection refused" in rest or "could not connect" in rest
    assert "hunter2" not in first + rest
    assert "max_size" not in rest  # no advice about a pool option the console does not have


def test_libpq_key_value_dsn_is_taken_for_postgres_not_a_file(tmp_path: Path) -> None:
    port = _closed_port()
    dsn = f"host=127.0.0.1 port={port} dbname=ledger"
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", "--db", dsn, "list"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 4
    assert "Postgres" in done.stderr and "SQLite" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no file named after the DSN


def test_schema_with_a_sqlite_path_is_a_usage_error(ledgerfile: Ledgerfile) -> None:
    done = run("--db", str(ledgerfile.path), "list", "--schema", "x")
    assert done.returncode == exitcodes.ExitCode.USAGE
    assert "Postgres" in done.stderr


# -- concurrent setup -------------------------------------------------------------------------


@pytest.mark.postgres
def test_four_concurrent_setups_on_a_fresh_database_all_succeed(fresh_pg: str, tmp_path: Path) -> None:
    """Four workers connect, wait at a barrier, then call AsyncEffectPostgresSaver.setup() at once."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.pg_setup_worker", fresh_pg, str(tmp_path), f"w{i}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for i in range(4)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("*.ready"))) < 4:
        assert time.monotonic() < deadline and all(w.poll() is None for w in workers)
        time.sleep(0.02)
    (tmp_path / "go").touch()
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], outputs
    assert {"public.checkpoints", "public.checkpoint_migrations", "public.effect_operations"} <= (
        _user_tables(fresh_pg)
    )


@pytest.mark.postgres
def test_four_concurrent_console_setups_all_succeed(fresh_pg: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_EFFECTS_DB"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "langgraph_effects.cli", "--db", fresh_pg, "setup", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    listed = run("--db", fresh_pg, "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["count"] == 0


# -- hints and exit codes ------------------------------------------------------------------------


def test_printed_hints_run_as_printed(ledgerfile: Ledgerfile, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shown = run("--db", str(ledgerfile.path), "show", REVIEW)
    assert shown.returncode == 0, shown.stderr
    lines = [line.strip() for line in shown.stdout.splitlines()]
    not_landed = next(line for line in lines if line.endswith("--not-landed"))
    assert f"--db {shlex.quote(str(ledgerfile.path))}" in not_landed
    argv = shlex.split(not_landed)
    assert argv[0] == "langgraph-effects"
    # Pasted from another directory with no LANGGRAPH_EFFECTS_DB: it still works.
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", *argv[1:]],
        capture_output=True, text=True, cwd=elsewhere, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "LANGGRAPH_EFFECTS_DB"},
    )
    assert done.returncode == 0, done.stderr
    op, _ = ledgerfile.read(REVIEW)
    assert op is not None and op.state.value == "pending"

    missing = run("--db", str(ledgerfile.path), "show", "op_nope")
    assert missing.returncode == exitcodes.ExitCode.NOT_FOUND
    hint = next(line for line in missing.stderr.splitlines() if "langgraph-effects --db" in line)
    command = hint[hint.index("`") + 1 : hint.rindex("`")]
    listed = subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", *shlex.split(command)[1:]],
        capture_output=True, text=True, cwd=elsewhere, timeout=120,
    )
    assert listed.returncode == 0, listed.stderr


def test_one_exit_code_table_everywhere() -> None:
    # The documentation's table is generated from exitcodes.TABLE when the site is built.
    assert "<!-- generated: exit-codes -->" in (ROOT / "docs" / "recovery.md").read_text()
    flat = " ".join(exitcodes.HELP.split())
    for args in (("--help",), ("list", "--help"), ("resolve", "--help"), ("setup", "--help"),
                 ("lab", "--help")):
        done = run(*args, env={"COLUMNS": "1000"})
        assert done.returncode == 0, (args, done.stderr)
        text = " ".join(done.stdout.replace("│", " ").split())
        assert flat in text, args
    assert run("list", "--bogus").returncode == exitcodes.ExitCode.USAGE
    assert run("lab", "--crash-points", "nowhere").returncode == exitcodes.ExitCode.USAGE

