"""The console ``langgraph-effects``, run as a subprocess against real SQLite ledgers.

The ledger files are populated with the SqliteLedger API (see ``tests/test_operator``)
and read back with it after each command, so "nothing changed" is checked on the
stored row and its audit trail, not on the console's word.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import cli
from langgraph_effects.core.operation import Operation, State
from langgraph_effects.ledger.sqlite import SqliteLedger
from tests.helpers import run_console

from .test_operator import SECRET_RESULT, dead_owner, make_op, seeded_ledger_file

pytestmark = pytest.mark.slow  # the console as a subprocess

REVIEW = "op_" + "a" * 32
LIVE = "op_" + "b" * 32
EXPIRED = "op_" + "c" * 32
DONE = "op_" + "d" * 32
TENANTED = "op_" + "e" * 32


@dataclass(frozen=True)
class Ledgerfile:
    path: Path

    def read(self, op_id: str) -> tuple[Operation | None, int]:
        """The stored operation and the length of its audit trail."""

        async def go() -> tuple[Operation | None, int]:
            async with SqliteLedger.from_conn_string(self.path) as ledger:
                await ledger.setup()
                return await ledger.get(op_id), len(await ledger.audit(op_id))

        return asyncio.run(go())


@pytest.fixture
def ledgerfile(tmp_path: Path) -> Ledgerfile:
    path = tmp_path / "agent.sqlite"
    seeded_ledger_file(
        path,
        (make_op(REVIEW, thread_id="thread-a"), "review"),
        (make_op(LIVE, thread_id="thread-b", tool="open_ticket"), "dispatched", {"lease_seconds": 600}),
        (
            make_op(EXPIRED, thread_id="thread-b"),
            "dispatched",
            {"owner": dead_owner(), "lease_seconds": 600},
        ),
        (make_op(DONE, thread_id="thread-a"), "confirmed"),
        (make_op(TENANTED, tenant="acme"), "unknown"),
    )
    return Ledgerfile(path)


run = run_console  # the console in a fresh interpreter, as an operator runs it


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout)


# -- list -------------------------------------------------------------------------------


def test_list_table(ledgerfile: Ledgerfile) -> None:
    done = run("list", "--db", str(ledgerfile.path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for op_id in (REVIEW, LIVE, EXPIRED, TENANTED):
        assert op_id in out
    assert DONE not in out
    assert "review" in out and "unknown" in out
    assert "dispatched (live)" in out
    assert "dispatched (owner dead)" in out
    assert "[redacted]" in out  # the redaction marker is shown, not eaten as markup
    assert "lge_" + "a" * 32 in out  # provider key
    assert "ago" in out


def test_list_json_and_filters(ledgerfile: Ledgerfile) -> None:
    db = str(ledgerfile.path)
    data = as_json(run("list", "--db", db, "--json"))
    assert data["count"] == 4 and not data["truncated"]
    by_id = {op["operation_id"]: op for op in data["operations"]}
    assert set(by_id) == {REVIEW, LIVE, EXPIRED, TENANTED}
    assert by_id[LIVE]["lease"] == "live" and by_id[LIVE]["allowed_verdicts"] == []
    assert by_id[EXPIRED]["lease"] == "owner_dead"
    assert by_id[REVIEW]["allowed_verdicts"] == ["landed", "not_landed", "abandon"]
    assert by_id[REVIEW]["args"]["api_key"] == "[redacted]"

    def ids(*args: str) -> set[str]:
        done = run("list", "--db", db, "--json", *args)
        assert done.returncode == 0, done.stderr
        return {op["operation_id"] for op in as_json(done)["operations"]}

    assert ids("--state", "review") == {REVIEW}
    assert ids("--state", "review", "-s", "UNKNOWN") == {REVIEW, TENANTED}
    assert ids("--all") == {REVIEW, LIVE, EXPIRED, DONE, TENANTED}
    assert ids("--thread", "thread-b") == {LIVE, EXPIRED}
    assert ids("--tool", "open_ticket") == {LIVE}
    assert ids("--tenant", "acme") == {TENANTED}
    assert ids("--older-than", "1h") == set()
    assert len(ids("--limit", "2")) == 2


def test_db_from_the_environment_or_before_the_command(ledgerfile: Ledgerfile) -> None:
    from_env = run("list", "--json", env={"LANGGRAPH_EFFECTS_DB": str(ledgerfile.path)})
    assert from_env.returncode == 0, from_env.stderr
    assert as_json(from_env)["count"] == 4
    global_opts = run("--db", str(ledgerfile.path), "--json", "list")
    assert global_opts.returncode == 0, global_opts.stderr
    assert as_json(global_opts)["count"] == 4


# -- show -------------------------------------------------------------------------------


def test_show(ledgerfile: Ledgerfile) -> None:
    done = run("show", REVIEW, "--db", str(ledgerfile.path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert REVIEW in out
    assert "lge_" + "a" * 32 in out
    assert "h1:" in out  # args hash
    assert "[redacted]" in out
    assert "audit trail" in out
    for event in ("intent", "lose", "escalate"):
        assert event in out
    assert f"resolve {REVIEW} --expected-version 3 --landed" in out


def test_show_json_and_result_never_printed(ledgerfile: Ledgerfile) -> None:
    done = run("show", DONE, "--db", str(ledgerfile.path), "--json")
    assert done.returncode == 0, done.stderr
    data = as_json(done)
    assert data["operation"]["state"] == "confirmed"
    assert data["allowed_verdicts"] == []
    assert data["operation"]["result"]["bytes"] == len(SECRET_RESULT)
    assert [entry["event"] for entry in data["audit"]] == ["intent", "succeed"]
    human = run("show", DONE, "--db", str(ledgerfile.path))
    for text in (done.stdout, human.stdout, human.stderr):
        assert SECRET_RESULT.decode() not in text
    assert "not shown" in human.stdout


def test_show_missing_operation_exits_8(ledgerfile: Ledgerfile) -> None:
    done = run("show", "op_nope", "--db", str(ledgerfile.path))
    assert done.returncode == 8
    assert "no operation 'op_nope'" in done.stderr
    other_tenant = run("show", TENANTED, "--tenant", "globex", "--db", str(ledgerfile.path))
    assert other_tenant.returncode == 8
    data = as_json(run("show", "op_nope", "--db", str(ledgerfile.path), "--json"))
    assert data["error"]["kind"] == "not_found" and data["error"]["exit_code"] == 8


# -- resolve ----------------------------------------------------------------------------


def test_resolve_landed_with_receipt(ledgerfile: Ledgerfile) -> None:
    done = run(
        "resolve",
        REVIEW,
        "--landed",
        "--receipt",
        '{"id": "r1"}',
        "--expected-version",
        "3",
        "--actor",
        "alice",
        "--db",
        str(ledgerfile.path),
    )
    assert done.returncode == 0, done.stderr
    assert "review -> confirmed" in done.stdout
    op, trail = ledgerfile.read(REVIEW)
    assert op is not None
    assert (op.state, op.version, trail) == (State.CONFIRMED, 4, 4)
    assert op.evidence is not None
    assert op.evidence["receipt"] == {"id": "r1"}
    assert op.evidence["channel"] == "console"
    assert op.evidence["actor"] == "alice"


def test_resolve_json_and_idempotent_retry(ledgerfile: Ledgerfile) -> None:
    db = str(ledgerfile.path)
    args = ("resolve", TENANTED, "--not-landed", "--expected-version", "2", "--db", db)
    first = run(*args, "--decision-id", "dec-42", "--json")
    assert first.returncode == 0, first.stderr
    data = as_json(first)
    assert data["decision_id"] == "dec-42" and not data["replayed"]
    assert data["operation"]["state"] == "pending"
    after_first = ledgerfile.read(TENANTED)

    retry = run(*args, "--decision-id", "dec-42")
    assert retry.returncode == 0, retry.stderr
    assert "Already recorded" in retry.stdout
    assert ledgerfile.read(TENANTED) == after_first

    conflict = run(
        "resolve",
        TENANTED,
        "--abandon",
        "--reason",
        "x",
        "--expected-version",
        "3",
        "--decision-id",
        "dec-42",
        "--db",
        db,
    )
    assert conflict.returncode == 3
    assert "dec-42" in conflict.stderr
    assert ledgerfile.read(TENANTED) == after_first


def test_stale_expected_version_is_refused_and_nothing_changes(ledgerfile: Ledgerfile) -> None:
    before = ledgerfile.read(REVIEW)
    done = run(
        "resolve",
        REVIEW,
        "--landed",
        "--receipt",
        '{"id": "r1"}',
        "--expected-version",
        "2",
        "--db",
        str(ledgerfile.path),
    )
    assert done.returncode == 3
    assert "version 3, not 2" in done.stderr
    assert ledgerfile.read(REVIEW) == before
    data = as_json(
        run(
            "resolve",
            REVIEW,
            "--not-landed",
            "--expected-version",
            "1",
            "--db",
            str(ledgerfile.path),
            "--json",
        )
    )
    assert data["error"]["kind"] == "stale_version"
    assert (data["error"]["expected_version"], data["error"]["actual_version"]) == (1, 3)
    assert ledgerfile.read(REVIEW) == before


@pytest.mark.parametrize(
    "flags",
    [
        ("--landed", "--receipt", "{id: r1}"),  # not JSON
        ("--landed", "--not-landed"),  # two decisions
        (),  # no decision
        ("--abandon",),  # no reason
        ("--not-landed", "--receipt", "{}"),  # receipt without --landed
        ("--landed", "--expected-version", "zero"),  # not a number
    ],
)
def test_bad_input_exits_2_and_writes_nothing(ledgerfile: Ledgerfile, flags: Sequence[str]) -> None:
    before = ledgerfile.read(REVIEW)
    version = [] if "--expected-version" in flags else ["--expected-version", "3"]
    done = run("resolve", REVIEW, *flags, *version, "--db", str(ledgerfile.path))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.strip()
    assert ledgerfile.read(REVIEW) == before


def test_invalid_receipt_json_says_what_to_do(ledgerfile: Ledgerfile) -> None:
    done = run(
        "resolve",
        REVIEW,
        "--landed",
        "--receipt",
        "{id: r1}",
        "--expected-version",
        "3",
        "--db",
        str(ledgerfile.path),
    )
    assert done.returncode == 2
    assert "--receipt is not valid JSON" in done.stderr


def test_live_lease_refused_expired_lease_resolved(ledgerfile: Ledgerfile) -> None:
    db = str(ledgerfile.path)
    before = ledgerfile.read(LIVE)
    live = run("resolve", LIVE, "--not-landed", "--expected-version", "1", "--db", db)
    assert live.returncode == 3
    assert "being sent right now" in live.stderr
    assert ledgerfile.read(LIVE) == before

    expired = run("resolve", EXPIRED, "--landed", "--expected-version", "1", "--db", db, "--json")
    assert expired.returncode == 0, expired.stderr
    data = as_json(expired)
    assert data["lease_lost"] is True
    assert data["from_state"] == "dispatched"
    op, trail = ledgerfile.read(EXPIRED)
    assert op is not None and (op.state, op.version, trail) == (State.CONFIRMED, 3, 3)


def test_terminal_operation_refused(ledgerfile: Ledgerfile) -> None:
    before = ledgerfile.read(DONE)
    done = run(
        "resolve",
        DONE,
        "--abandon",
        "--reason",
        "cleanup",
        "--expected-version",
        "2",
        "--db",
        str(ledgerfile.path),
    )
    assert done.returncode == 3
    assert "already 'confirmed'" in done.stderr
    assert ledgerfile.read(DONE) == before


def test_tenant_scoped_resolve(ledgerfile: Ledgerfile) -> None:
    before = ledgerfile.read(TENANTED)
    done = run(
        "resolve",
        TENANTED,
        "--not-landed",
        "--expected-version",
        "2",
        "--tenant",
        "globex",
        "--db",
        str(ledgerfile.path),
    )
    assert done.returncode == 8
    assert ledgerfile.read(TENANTED) == before


# -- the ledger itself ----------------------------------------------------------------


def test_missing_database_exits_4_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo.sqlite"
    done = run("list", "--db", str(missing))
    assert done.returncode == 4
    assert str(missing) in done.stderr and "does not exist" in done.stderr
    assert not missing.exists()
    resolved = run("resolve", REVIEW, "--not-landed", "--expected-version", "3", "--db", str(missing))
    assert resolved.returncode == 4
    assert not missing.exists()


def test_database_without_a_ledger_exits_4(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    done = run("list", "--db", str(other), "--json")
    assert done.returncode == 4
    assert as_json(done)["error"]["kind"] == "ledger_not_found"
    assert "holds no langgraph-effects ledger" in done.stderr


def test_not_a_database_exits_4(tmp_path: Path) -> None:
    garbage = tmp_path / "notes.txt"
    garbage.write_text("these are my notes, not a database\n" * 200)
    done = run("list", "--db", str(garbage))
    assert done.returncode == 4
    assert "not a usable SQLite database" in done.stderr


def test_no_db_given_exits_2() -> None:
    done = run("list")
    assert done.returncode == 2
    assert "LANGGRAPH_EFFECTS_DB" in done.stderr


# -- usage --------------------------------------------------------------------------------


def test_help_documents_exit_codes() -> None:
    done = run("--help")
    assert done.returncode == 0
    for text in ("list", "show", "resolve", "lab", "Exit codes", "4 ledger unavailable"):
        assert text in done.stdout
    assert "recover" in done.stdout
    resolve_help = run("resolve", "--help")
    assert resolve_help.returncode == 0 and "--expected-version" in resolve_help.stdout


def test_usage_errors_exit_2() -> None:
    assert run().returncode == 2  # prints the help
    unknown = run("list", "--bogus")
    assert unknown.returncode == 2 and "--bogus" in unknown.stderr
    assert run("frobnicate").returncode == 2
    assert run("list", "--state", "nonsense", "--db", "x").returncode == 2
    assert run("list", "--older-than", "soon", "--db", "x").returncode == 2


def test_installed_script() -> None:
    script = shutil.which("langgraph-effects", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the langgraph-effects script is not installed in this environment")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Exit codes" in done.stdout


# -- lab (in-process: the runner is replaced by a fake) ------------------------------------


def test_lab_reaches_the_runner() -> None:
    done = run("lab", "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage: langgraph-effects lab" in done.stdout
    assert "--kill-every" in done.stdout and "Exit codes (every command)" in done.stdout


def test_lab_forwards_every_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    runner = types.ModuleType("langgraph_effects.lab.runner")
    runner.main = fake_main  # type: ignore[attr-defined]
    import langgraph_effects.lab

    monkeypatch.setitem(sys.modules, "langgraph_effects.lab.runner", runner)
    monkeypatch.setattr(langgraph_effects.lab, "runner", runner, raising=False)
    argv = ["--crash-at", "dispatch", "-n", "3", "--help", "scenario"]
    assert cli.main(["lab", *argv]) == 7
    assert seen == [argv]


def test_version_prints_the_installed_distributions_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import PackageNotFoundError, version

    import langgraph_effects

    try:
        expected = version("langgraph-effects")
    except PackageNotFoundError:  # run from a source tree that was never installed
        expected = langgraph_effects.__version__
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"langgraph-effects {expected}\n"
    # Eager: it answers before any command or ledger option is looked at.
    assert cli.main(["--version", "list"]) == 0
    assert capsys.readouterr().out == f"langgraph-effects {expected}\n"
