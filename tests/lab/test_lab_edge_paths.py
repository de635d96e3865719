"""The edge-path columns of the crash lab (issue 28), small (10 operations per cell).

* ``wedging-answer``: killed at B against the blind provider; the operator's first
  answer to the review is oversized (HITL ``respond`` over 64 KiB, or ``reject``
  over 4,096 characters), then it answers from the provider's records.
* ``definite-retry``: the first request of a faulted operation gets a 429 the
  contract declares definite; the tools node carries a ``RetryPolicy`` for it.
* ``edit-branch``: once the turn is done, the user's message is edited: new input
  at the thread's first checkpoint (a branch) asks for another send.
* ``child-process``: the request leaves from the tool's child process; the worker is
  SIGKILLed while the child is still about to send, and the thread resumed at once.
* ``reordered-entrypoint``: a Functional API entrypoint sends one notification per
  recipient of a set; killed at B on the second send, resumed by a new process that
  iterates the set in another order. Rows of their own: ``plain-entrypoint``
  (``@task``) and ``effectful-entrypoint`` (``@task`` over ``@effectful``).

The seed rows (plain ``ToolNode``, plain saver) show what these paths do without the
package; our rows are asserted as the issue-28 fixes make them behave, and marked
``xfail(strict=True)`` until those fixes are merged: each must flip then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects._runtime.messages import MAX_EVIDENCE_CHARS, MAX_RECEIPT_BYTES
from langgraph_effects.lab.child import await_stragglers, send_via_child
from langgraph_effects.lab.entrypoint import Recipient
from langgraph_effects.lab.faults import CRASH_POINTS, AttemptFaults, Faults, LabClient
from langgraph_effects.lab.harness import WEDGING_REJECT, WEDGING_RESPOND, wedging_answer
from langgraph_effects.lab.ours import NAME, check_cell
from langgraph_effects.lab.providers import Provider, ProviderError, RateLimited
from langgraph_effects.lab.runner import plan_cells
from langgraph_effects.lab.strategies import AuditCounts, CellFiles, CellReport, registered
from langgraph_effects.lab.worker import ProviderSettings
from tests.helpers.lab import run_async_rows

# slow; one group: the module-scoped lab run is made once, on one xdist worker
pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.xdist_group("lab_edge_paths")]

OPS, KILL_EVERY = 10, 5
FAULTED = OPS // KILL_EVERY
COLUMNS = ("wedging-answer", "definite-retry", "edit-branch", "child-process", "reordered-entrypoint")
#: The provider each column runs our row against (the path does not depend on the kind).
OURS = {
    "wedging-answer": "blind",
    "definite-retry": "blind",
    "edit-branch": "dedup",
    "child-process": "lookup",
}
ENTRYPOINT, PLAIN_ENTRYPOINT = "effectful-entrypoint", "plain-entrypoint"
RECIPIENTS = 3
SEED = ("retry-only", "record-after", "record-before", "provider-key")

Rows = dict[tuple[str, str], dict[str, Any]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Rows]:
    out_dir = tmp_path_factory.mktemp("lab")
    code, rows = run_async_rows(out_dir, ops=OPS, kill_every=KILL_EVERY, columns=COLUMNS)
    return code, {(r["strategy"], r["crash_point"]): r for r in rows}


def row(rows: Rows, strategy: str, column: str) -> dict[str, Any]:
    found = rows[(strategy, column)]
    assert found["error"] is None, found["error"]
    return found


def test_the_columns_ran_with_their_faults(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    ours = {(r["provider"], c) for (s, c), r in rows.items() if s == NAME}
    assert ours == {(OURS[c], c) for c in COLUMNS if c != "reordered-entrypoint"}
    # Seed rows run every ToolNode column but the ours-only one (they never ask an operator).
    tool_node = {c for c in COLUMNS if c not in ("wedging-answer", "reordered-entrypoint")}
    assert {(s, c) for s, c in rows if s not in (NAME, ENTRYPOINT, PLAIN_ENTRYPOINT)} == {
        (s, c) for s in SEED for c in tool_node
    }
    # The entrypoint rows run only their column.
    assert {(s, c) for s, c in rows if s in (ENTRYPOINT, PLAIN_ENTRYPOINT)} == {
        (ENTRYPOINT, "reordered-entrypoint"),
        (PLAIN_ENTRYPOINT, "reordered-entrypoint"),
    }
    for (strategy, column), r in rows.items():
        assert r["error"] is None, (strategy, column, r["error"])
        assert r["faulted"] == FAULTED, (strategy, column)
        killed = FAULTED if column in ("wedging-answer", "child-process", "reordered-entrypoint") else 0
        assert r["kills"] == killed, (strategy, column)
        intended = {"edit-branch": OPS + FAULTED, "reordered-entrypoint": RECIPIENTS * OPS}
        # A thread our package stopped (NondeterminismError) is excused the recipients it
        # never reached: at most all but the one sent before the kill, faulted threads only.
        excused = intended.get(column, OPS) - r["intended"]
        assert 0 <= excused <= len(r["stopped"]) * (RECIPIENTS - 1), (strategy, column)
        assert len(r["stopped"]) <= FAULTED, (strategy, column)


def test_the_operator_really_answered_oversized_first(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    r = row(rows, NAME, "wedging-answer")
    assert r["sent_to_review"] == FAULTED
    # The oversized answer, then at least one answer from the provider's records.
    assert r["reviews_answered"] >= 2 * FAULTED


def test_plain_toolnode_with_a_retry_policy_charges_once(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    for strategy in ("retry-only", "record-after", "provider-key"):
        r = row(rows, strategy, "definite-retry")
        assert (r["effects"], r["duplicates"], r["missing"]) == (OPS, 0, 0), strategy
        assert r["sends"] == OPS + FAULTED, strategy  # the 429 was a real request, then one retry
    # A marker written before the send makes the node's retry skip the call: lost.
    r = row(rows, "record-before", "definite-retry")
    assert (r["effects"], r["missing"]) == (OPS - FAULTED, FAULTED)


def test_plain_savers_branch_on_an_edited_message(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    for strategy in SEED:
        r = row(rows, strategy, "edit-branch")
        assert (r["effects"], r["duplicates"], r["missing"]) == (OPS + FAULTED, 0, 0), strategy
        assert r["refused"] == 0, strategy


def test_plain_toolnode_resends_while_the_child_still_sends(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    # The resumer re-runs the tool and the orphaned child sends too: both land.
    for strategy in ("retry-only", "record-after"):
        r = row(rows, strategy, "child-process")
        assert (r["effects"], r["duplicates"], r["missing"]) == (OPS + FAULTED, FAULTED, 0), strategy
    # A key absorbs it; a marker written first skips the re-send (the child's lands).
    for strategy in ("provider-key", "record-before"):
        r = row(rows, strategy, "child-process")
        assert (r["effects"], r["duplicates"], r["missing"]) == (OPS, 0, 0), strategy


def test_plain_functional_api_resends_after_a_reordered_resume(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    # The resume runs every task again, in its own order: the two sent before the kill twice.
    r = row(rows, PLAIN_ENTRYPOINT, "reordered-entrypoint")
    assert (r["effects"], r["duplicates"], r["missing"]) == (RECIPIENTS * OPS + 2 * FAULTED, 2 * FAULTED, 0)


def test_ours_an_oversized_answer_is_asked_again_not_wedged(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    r = row(rows, NAME, "wedging-answer")
    assert (r["effects"], r["duplicates"], r["missing"]) == (OPS, 0, 0)
    assert r["non_terminal"] == 0
    assert r["pending_reviews"] == 0
    assert r["violations"] == []


def test_ours_a_definite_429_reaches_the_retry_policy(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    r = row(rows, NAME, "definite-retry")
    assert (r["effects"], r["duplicates"], r["missing"]) == (OPS, 0, 0)
    assert r["sends"] == OPS + FAULTED  # one 429, one retry, per faulted operation
    assert r["tool_errors"] == 0
    assert r["violations"] == []


def test_ours_an_edited_message_branches(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    r = row(rows, NAME, "edit-branch")
    assert (r["effects"], r["duplicates"], r["missing"]) == (OPS + FAULTED, 0, 0)
    assert r["refused"] == 0
    assert r["violations"] == []


def test_ours_the_resumer_never_races_the_orphaned_child(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    r = row(rows, NAME, "child-process")
    assert (r["effects"], r["duplicates"], r["missing"]) == (OPS, 0, 0)
    assert r["sends"] == r["effects"]  # the child's request was never sent again
    assert r["violations"] == []


def test_ours_a_reordered_entrypoint_never_sends_anything_wrong(lab: tuple[int, Rows]) -> None:
    _, rows = lab
    r = row(rows, ENTRYPOINT, "reordered-entrypoint")
    # Every recipient once; a thread may instead stop with our error before sending
    # anything wrong (its unsent recipients are excused, counted as stopped).
    assert (r["duplicates"], r["missing"]) == (0, 0)
    assert r["refused_foreign"] == []
    assert r["violations"] == []


def test_the_exit_code_follows_our_rows(lab: tuple[int, Rows]) -> None:
    code, _ = lab
    assert code == 0


# -- the pieces, without running a cell ----------------------------------------------


def test_our_rows_run_only_the_providers_the_path_depends_on() -> None:
    strategies = list(registered().values())
    cells = plan_cells(
        strategies, list(COLUMNS), ops=1, kill_every=1, phase=0, settings=ProviderSettings()
    )
    ours = {(c.provider, c.crash_point.name) for c in cells if c.strategy.name == NAME}
    assert ours == {(OURS[c], c) for c in COLUMNS if c != "reordered-entrypoint"}
    assert {c.strategy.name for c in cells if c.crash_point.name == "reordered-entrypoint"} == {
        ENTRYPOINT,
        PLAIN_ENTRYPOINT,
    }
    assert all(CRASH_POINTS[c].group == "edge paths" for c in COLUMNS)


def test_the_wedging_answers_are_over_the_limits() -> None:
    value = {"type": "effect_review", "action_requests": [{"name": "a"}, {"name": "b"}]}
    respond = wedging_answer([("i1", value)], "respond")
    assert respond == {"i1": {"decisions": [{"type": "respond", "message": WEDGING_RESPOND}] * 2}}
    assert len(json.dumps(WEDGING_RESPOND)) > MAX_RECEIPT_BYTES
    reject = wedging_answer([("i1", value)], "reject")
    assert reject["i1"]["decisions"][0] == {"type": "reject", "message": WEDGING_REJECT}
    assert len(WEDGING_REJECT) > MAX_EVIDENCE_CHARS
    # Within the schema's characters, over the receipt's bytes: stored, then refused.
    [pasted] = wedging_answer([("i1", value)], "pasted")["i1"]["decisions"][:1]
    encoded = json.dumps(pasted["message"], ensure_ascii=False).encode()
    assert len(pasted["message"]) <= MAX_RECEIPT_BYTES < len(encoded)


def test_a_429_is_logged_and_applies_nothing(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "p.sqlite", "blind").setup()
    client = LabClient(provider, Faults())
    client.faults.arm(AttemptFaults(rate_limit=True))
    with pytest.raises(RateLimited):
        client.send({"operation": "op-1", "body": "hi"})
    client.send({"operation": "op-1", "body": "hi"})  # once per attempt: the retry lands
    tally = provider.tally(["op-1"])
    assert (tally.sends, tally.effects, tally.missing) == (2, 1, 0)
    # Left to a RetryPolicy by a node that turns provider errors into messages.
    assert not issubclass(RateLimited, ProviderError)


def test_a_child_sends_from_its_own_process_and_leaves_no_marker(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "p.sqlite", "lookup").setup()
    pids: list[int] = []
    receipt = send_via_child(
        provider,
        {"operation": "op-1", "body": "hi"},
        key="ref-1",
        markers=tmp_path / "children",
        armed=False,
        started=pids.append,
    )
    [record] = provider.effects()
    assert (receipt.effect_id, receipt.key) == (record.effect_id, "ref-1")
    assert pids and pids[0] > 0
    assert await_stragglers(tmp_path / "children", timeout=1) == 0


def test_definite_retry_counts_the_429s_as_requests() -> None:
    def report(sends: int) -> CellReport:
        return CellReport(
            files=CellFiles.under(Path("/nonexistent")),
            provider_mode="blind",
            crash_point="definite-retry",
            intended=OPS,
            faulted=FAULTED,
            kills=0,
            sends=sends,
            effects=OPS,
            sent_to_review=0,
            reviews_answered=0,
            tool_errors=0,
            audit=AuditCounts(non_terminal=0),
        )

    assert check_cell(report(OPS + FAULTED)) == []
    [problem] = check_cell(report(OPS + FAULTED + 1))
    assert "re-sent without an operator" in problem


def test_each_new_worker_iterates_the_set_in_another_order(monkeypatch: pytest.MonkeyPatch) -> None:
    orders = []
    for generation in range(3):
        monkeypatch.setattr(Recipient, "generation", generation)
        recipients = {Recipient(f"tenant-lab:notification:7/{name}") for name in ("ann", "bob", "cy")}
        orders.append([r.rsplit("/", 1)[-1] for r in recipients])
    assert orders == [["ann", "bob", "cy"], ["bob", "cy", "ann"], ["cy", "ann", "bob"]]
