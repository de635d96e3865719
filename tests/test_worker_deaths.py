"""Worker deaths do not use up ``max_attempts`` of a call whose contract settles a re-send.

A worker that dies (SIGKILL) ends every call it had dispatched with no outcome. Before,
each such death counted one attempt of each dispatched call, so after ``max_attempts``
(3) deaths in a row a dedup call inside its window, or a call whose strong lookup
proves the effect absent, went to review though the evidence allowed the re-send.
Now a send ended by a lost lease does not count (``core.reconcile.tried``): the call
settles itself, with one effect at a provider that keeps its own records. A blind call
goes to review after the first death, as before.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.lab.providers import Provider
from tests.helpers import run_python
from tests.helpers.agent import Spec, spec_json

pytestmark = [pytest.mark.crash, pytest.mark.slow]
DEATHS = 5  # more than the default max_attempts (3)


def run_worker(spec: Spec, *, expect_kill: bool = False) -> dict[str, Any]:
    return run_python("-m", "tests.helpers.agent", spec_json(spec), expect_kill=expect_kill)


def provider(s: Spec) -> Provider:
    return Provider(s.provider, s.provider_mode)  # type: ignore[arg-type]


def trail(s: Spec) -> list[tuple[str, str | None]]:
    """(event, evidence kind) of the one operation's audit trail, in order."""
    with sqlite3.connect(s.db) as db:
        rows = db.execute("SELECT event, evidence FROM effect_audit ORDER BY seq").fetchall()
    return [(event, json.loads(evidence or "{}").get("kind")) for event, evidence in rows]


@pytest.mark.parametrize(
    ("contract", "mode", "killed"),
    [
        ("dedup", "dedup", {"crash": "before_outcome"}),  # killed after each send landed (deduped)
        ("lookup", "lookup", {"kill_before_send": True}),  # killed before each send left
    ],
)
def test_a_call_whose_contract_settles_it_outlives_more_deaths_than_max_attempts(
    tmp_path: Path, contract: str, mode: str, killed: dict[str, Any]
) -> None:
    s = Spec(
        db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"),
        contract=contract, provider_mode=mode,
    )
    run_worker(replace(s, **killed), expect_kill=True)
    for _ in range(DEATHS - 1):
        # Before the fix the third resume found attempts used up: review, no kill.
        run_worker(replace(s, resume=True, **killed), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    assert out["interrupts"] == []
    [message] = [m for m in out["messages"] if m["type"] == "tool"]
    assert message["status"] == "success" and message["artifact"]["state"] == "confirmed"
    assert message["artifact"]["attempts"] == DEATHS + 1
    assert provider(s).count_effects() == {"t1:0": 1}
    if contract == "dedup":
        assert provider(s).count_requests("apply") == DEATHS + 1  # every re-send deduped
    else:
        assert provider(s).count_requests("apply") == 1  # the deaths came before the send
    events = trail(s)
    assert events.count(("lose", "lease")) == DEATHS and ("escalate", "attempts") not in events
    assert out["messages"][-1]["content"] == "done"


def test_a_blind_call_goes_to_review_after_one_death_as_before(tmp_path: Path) -> None:
    s = Spec(
        db=str(tmp_path / "agent.sqlite"), provider=str(tmp_path / "provider.sqlite"),
        contract="blind", provider_mode="blind",
    )
    run_worker(replace(s, crash="before_outcome"), expect_kill=True)
    out = run_worker(replace(s, resume=True))
    [pending] = out["interrupts"]
    [entry] = pending["value"]["operations"]
    assert entry["state"] == "review" and entry["evidence"]["kind"] == "blind"
    assert provider(s).count_effects() == {"t1:0": 1} and provider(s).count_requests("apply") == 1
