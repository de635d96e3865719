"""A late send by an overtaken owner is recorded in the operation's audit and shown by ``show``.

The documented limit of leases across hosts (docs/leases.md, "The residual risk"):
worker A on one host stalls after its last check, past its lease; worker B on another
host takes the operation over by the clock, finds it absent and sends it; A wakes and
sends too. Before, A's late send was only a log line: the ledger said "confirmed, one
send", and an operator could not see that a second request reached the provider. Now
the late send is a ``late`` note in the audit trail (``protocol.late``), and
``langgraph-effects show`` (and its ``--json``) says a second request may have
reached the provider. Real processes: A SIGSTOPs itself mid-send and is SIGCONTed once
B is done; effects are counted at a provider that keeps its own records.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import run_console

from .test_leases import Worker, audit, effects, lease_spec, ledger_rows, wait_for, wait_stopped, workers

pytestmark = [pytest.mark.crash, pytest.mark.slow]
__all__ = ["workers"]  # the fixture, used by name


def test_a_late_send_by_an_overtaken_owner_is_in_the_audit_and_shown(
    tmp_path: Path, workers: list[Worker]
) -> None:
    s = lease_spec(tmp_path, contract="lookup", provider_mode="lookup", lease_seconds=2.0)
    a = Worker(replace(s, stall="stop"), tmp_path, "a", host="host-a")
    workers.append(a)
    a_pid = wait_for(Path(s.marker))["pid"]
    wait_stopped(a_pid)  # past its last check, about to send
    [row] = ledger_rows(s)
    while time.time() <= row["lease_expires_at"] + 0.5:
        time.sleep(0.05)

    b = Worker(replace(s, resume=True), tmp_path, "b", host="host-b")
    workers.append(b)
    out_b = b.result()  # took it over by the clock, found it absent, sent it
    assert out_b["sends"] == 1 and effects(s) == 1

    os.kill(a_pid, signal.SIGCONT)
    out_a = a.result()
    assert out_a["sends"] == 1 and effects(s) == 2  # the documented limit: a second effect

    [row] = ledger_rows(s)
    assert row["state"] == "confirmed"
    assert json.loads(row["evidence"])["sender"]["pid"] == b.proc.pid  # B's result stands
    trail = audit(s)
    assert [e["event"] for e in trail] == ["intent", "lose", "resend", "succeed", "late"]
    late = json.loads(trail[-1]["evidence"])
    assert late["kind"] == "late" and late["outcome"] == "result"
    assert late["state_then"] == "confirmed" and late["sender"]["pid"] == a_pid
    assert (trail[-1]["from_state"], trail[-1]["to_state"]) == ("confirmed", "confirmed")

    shown = run_console("show", row["op_id"], "--db", s.db)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "A second request may have reached the provider" in text and f"pid {a_pid} on host-a" in text
    as_json = run_console("show", row["op_id"], "--db", s.db, "--json")
    assert as_json.returncode == 0, as_json.stderr
    [entry] = json.loads(as_json.stdout)["late_sends"]
    assert entry["event"] == "late" and entry["evidence"]["sender"]["pid"] == a_pid
