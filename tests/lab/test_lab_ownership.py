"""The identity and ownership columns of the crash lab, small (10 operations per cell).

Each column is a path issue 13 found broken with real processes:

* ``repeated-ids``: two turns of one thread ask for the same call, the model
  repeating its message id and ``call_0``; the worker is SIGKILLed at B in the
  second turn. Two effects are intended per thread.
* ``two-runners``: killed at B, then ``recover()`` and a plain resume start at the
  same instant; each runner's model words its follow-up send differently.
* ``paused-owner``: the worker SIGSTOPs itself at A, past its 0.5 s lease, while a
  second worker resumes the thread; then it is continued (SIGCONT).
* ``tool-interrupt``: one AIMessage with two sends and a read-only question that
  calls ``interrupt()`` while both sends are still in flight at the provider.

Rows of ours must end with exactly the intended effects, counted from the
provider's own records, and nothing open in the ledger. The seed rows (plain
``ToolNode``) show what those paths cost without this package: they must bite,
or the column would prove nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab.ours import NAME, check_cell
from langgraph_effects.lab.providers import KeyInFlight, Provider
from langgraph_effects.lab.runner import SOAK_FAULTS, main, plan_soak
from langgraph_effects.lab.strategies import AuditCounts, CellFiles, CellReport, registered
from langgraph_effects.lab.worker import ProviderSettings
from tests.helpers.lab import run_async_rows

# slow; one group: the module-scoped lab run is made once, on one xdist worker
pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.xdist_group("lab_ownership")]

OPS, KILL_EVERY = 10, 5
FAULTED = OPS // KILL_EVERY
PROVIDERS = ("dedup", "lookup", "lagging", "withdrawn", "blind")
COLUMNS = ("repeated-ids", "two-runners", "paused-owner", "tool-interrupt")
#: Effects intended per operation in each column.
PER_OPERATION = {"repeated-ids": 2, "two-runners": 2, "paused-owner": 1, "tool-interrupt": 2}

Rows = dict[tuple[str, str, str], dict[str, Any]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Rows]:
    out_dir = tmp_path_factory.mktemp("lab")
    code, rows = run_async_rows(out_dir, ops=OPS, kill_every=KILL_EVERY, columns=COLUMNS)
    return code, {(r["strategy"], r["provider"], r["crash_point"]): r for r in rows}


def ours(rows: Rows, provider: str, column: str) -> dict[str, Any]:
    row = rows[(NAME, provider, column)]
    assert row["error"] is None, row["error"]
    return row


def seed(rows: Rows, strategy: str, column: str) -> dict[str, Any]:
    [row] = [r for (s, _, c), r in rows.items() if (s, c) == (strategy, column)]
    assert row["error"] is None, row["error"]
    return row


def test_every_cell_ran_with_its_faults(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    assert {(p, c) for s, p, c in rows if s == NAME} == {(p, c) for p in PROVIDERS for c in COLUMNS}
    for (strategy, provider, column), row in rows.items():
        assert row["error"] is None, (strategy, provider, column, row["error"])
        assert row["faulted"] == FAULTED, (strategy, provider, column)
        assert row["intended"] == OPS * PER_OPERATION[column], (strategy, provider, column)


@pytest.mark.parametrize("column", COLUMNS)
def test_ours_exactly_the_intended_effects(lab: tuple[int, Rows], column: str) -> None:
    _, rows = lab
    for provider in PROVIDERS:
        row = ours(rows, provider, column)
        counts = (row["effects"], row["duplicates"], row["missing"])
        assert counts == (OPS * PER_OPERATION[column], 0, 0), (provider, row)
        # Counted from effect_operations in the ledger file: every operation is terminal.
        assert row["non_terminal"] == 0, provider
        assert row["pending_reviews"] == 0, provider
        assert row["tool_errors"] == 0, provider  # the model was never told a call failed
        # A runner that lost the thread failed with one of our errors, never another.
        assert row["refused_foreign"] == [], provider
        assert row["violations"] == [], (provider, row["violations"])


def test_ours_the_second_turn_really_sent(lab: tuple[int, Rows]) -> None:
    # The kill at B of the second turn only happens if that turn dispatched its own
    # request, instead of being answered from the first turn's operation.
    _, rows = lab
    for provider in PROVIDERS:
        row = ours(rows, provider, "repeated-ids")
        assert row["kills"] == FAULTED, provider
        assert row["audit"]["operations"] == 2 * OPS, provider


def test_ours_a_paused_owner_is_waited_for(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    for provider in PROVIDERS:
        row = ours(rows, provider, "paused-owner")
        assert row["kills"] == FAULTED, provider  # every faulted worker really stopped
        assert row["sent_to_review"] == 0, provider  # its owner was alive: nothing to ask
        # One request per thread: nothing was sent while the owner's was still to come
        # (not even under the same key to a provider that would have deduplicated it).
        assert row["sends"] == OPS, provider


def test_ours_in_flight_siblings_are_not_sent_again(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    for provider in PROVIDERS:
        row = ours(rows, provider, "tool-interrupt")
        assert row["sent_to_review"] == 0, provider
        # Two requests per thread: a send still in flight is waited for, never repeated.
        assert row["sends"] == 2 * OPS, provider


def test_ours_two_runners_one_follow_up(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    for provider in PROVIDERS:
        row = ours(rows, provider, "two-runners")
        assert row["kills"] == FAULTED, provider
        assert row["audit"]["operations"] == 2 * OPS, provider  # one follow-up operation each


def test_plain_toolnode_loses_or_duplicates_on_these_paths(lab: tuple[int, Rows]) -> None:
    """The columns bite: without this package each path costs effects today."""
    _, rows = lab
    # Repeated ids: an identity made of thread + tool_call_id is the same in both turns.
    assert seed(rows, "provider-key", "repeated-ids")["missing"] == OPS
    assert seed(rows, "record-after", "repeated-ids")["missing"] == OPS
    assert seed(rows, "retry-only", "repeated-ids")["duplicates"] == FAULTED
    # Two runners: both re-send, and each sends its own follow-up.
    assert seed(rows, "retry-only", "two-runners")["duplicates"] >= 2 * FAULTED
    # A paused worker wakes and sends what the second one already sent.
    assert seed(rows, "retry-only", "paused-owner")["duplicates"] == FAULTED
    # The interrupt re-runs the whole ToolNode: both sends of every thread again.
    assert seed(rows, "retry-only", "tool-interrupt")["duplicates"] == 2 * OPS


def test_the_exit_code_follows_our_rows(lab: tuple[int, Rows]) -> None:
    code, rows = lab
    broken = any(r["violations"] for r in rows.values() if r["ours"])
    assert code == (1 if broken else 0)


# -- the soak ---------------------------------------------------------------------------


def test_soak_report_shape(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["--soak", "10", "--soak-chunk", "2", "--seed", "7", "--json", str(out)])
    document = json.loads(out.read_text())
    totals, rows = document["totals"], document["rows"]
    assert document["soak"]["operations"] == 10 and document["soak"]["seed"] == 7
    # Five chunks, the providers taking turns, the operations numbered on.
    assert [(r["provider"], r["first_operation"], r["operations"]) for r in rows] == [
        ("dedup", 1, 2),
        ("lookup", 3, 2),
        ("lagging", 5, 2),
        ("withdrawn", 7, 2),
        ("blind", 9, 2),
    ]
    assert totals["operations"] == totals["intended"] == 10
    # Seed 7 draws 8 faults: B, A, A, A (certain kills) and 4 kills at random moments.
    assert totals["faulted"] == sum(r["faulted"] for r in rows) == 8
    assert totals["kills"] == sum(r["kills"] for r in rows) >= 4
    for name in ("duplicates", "missing", "non_terminal", "pending_reviews"):
        assert totals[name] == 0, (name, rows)
    assert code == 0
    words = " ".join(printed.getvalue().split())
    assert "soak: 10 operations" in words and "0 duplicates, 0 missing, 0 left non-terminal" in words


def test_the_soak_schedule_is_seeded() -> None:
    settings = ProviderSettings()
    strategy = registered()[NAME]
    first = plan_soak(strategy, 1000, 100, 3, settings)
    assert [c.schedule for c in first] == [c.schedule for c in plan_soak(strategy, 1000, 100, 3, settings)]
    assert [c.schedule for c in first] != [c.schedule for c in plan_soak(strategy, 1000, 100, 4, settings)]
    kinds = [kind for cell in first for kind, _ in cell.schedule or ()]
    assert set(kinds) == {"none", *SOAK_FAULTS}
    assert 400 < kinds.count("none") < 600  # about half are left alone
    assert [c.provider for c in first[:5]] == list(PROVIDERS)


def test_soak_refuses_matrix_options() -> None:
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["--soak", "5", "--crash-points", "B"]) == 2
    assert "--soak" in err.getvalue()


def test_a_progress_line_per_cell_without_a_terminal(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "langgraph_effects.lab",
            "--ops",
            "2",
            "--strategies",
            "retry-only",
            "--crash-points",
            "none,B",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in lines] == ["[1/2", "[2/2"]
    assert {line.split(" ")[1].rstrip(":") for line in lines} == {
        "retry-only/blind/none",
        "retry-only/blind/B",
    }


# -- the provider pieces the columns rest on (no processes) -------------------------------


def test_tally_counts_against_the_intended_number(tmp_path: Path) -> None:
    with Provider(tmp_path / "p.sqlite", "blind") as provider:
        for label in ("a", "a", "a", "b"):
            provider.apply({"operation": label})
        tally = provider.tally({"a": 2, "b": 1, "c": 2})
    assert (tally.intended, tally.effects, tally.duplicates, tally.missing) == (5, 4, 1, 2)


def test_a_held_dedup_request_answers_a_concurrent_one_with_409(tmp_path: Path) -> None:
    release, claimed = threading.Event(), threading.Event()

    def hold() -> None:
        claimed.set()
        release.wait(5)

    with Provider(tmp_path / "p.sqlite", "dedup") as provider:
        first = threading.Thread(
            target=provider.apply, args=({"operation": "a"},), kwargs={"key": "k", "hold": hold}
        )
        first.start()
        assert claimed.wait(5)
        with pytest.raises(KeyInFlight):
            provider.apply({"operation": "a"}, key="k")
        assert provider.effects() == []  # still in flight: nothing applied yet
        release.set()
        first.join(5)
        assert [e.operation for e in provider.effects()] == ["a"]
        assert provider.apply({"operation": "a"}, key="k").replayed


def test_a_request_whose_sender_lives_is_never_sent_again() -> None:
    def report(point: str, sends: int) -> CellReport:
        return CellReport(
            files=CellFiles.under(Path("unused")),
            provider_mode="dedup",
            crash_point=point,
            intended=10,
            faulted=2,
            kills=2,
            sends=sends,
            effects=10,
            sent_to_review=0,
            reviews_answered=0,
            tool_errors=0,
            audit=AuditCounts(non_terminal=0),
        )

    for point in ("paused-owner", "tool-interrupt"):
        assert check_cell(report(point, 10)) == []
        [problem] = check_cell(report(point, 12))
        assert "12 requests for 10 effects" in problem
    # Elsewhere a dedup provider is re-sent to under the same key by design.
    assert check_cell(report("A", 12)) == []
