"""Leases under real processes: a live owner is never taken over.

Worker A dispatches and stalls mid-send (SIGSTOP, or an event loop blocked by
``time.sleep`` in an async tool) past its lease; worker B resumes the same thread.
Effects are counted at a provider that keeps its own records; the ledger's audit
trail says who sent. A and B resumed the thread from the same checkpoint, so once A
saved the next one, B's save is refused (``ThreadConflictError``, one runner per
thread): the lease keeps B from sending, the fence keeps it from forking the thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Effect,
    LedgerUnavailableError,
    OperationQuery,
)
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import lease
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import State
from tests.helpers.holder import start_holder
from tests.helpers.lease_agent import LeaseSpec, spec_json

pytestmark = [pytest.mark.crash, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 120.0


class Worker:
    """One ``tests.helpers.lease_agent`` process, its stderr collected in a file."""

    def __init__(
        self,
        spec: LeaseSpec,
        tmp: Path,
        name: str,
        host: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        env = {**os.environ, **(env or {})}
        if host is not None:
            env["LANGGRAPH_EFFECTS_HOST"] = host
        self.err_path = tmp / f"{name}.err"
        self.err = self.err_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.lease_agent", spec_json(spec)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )

    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_log(self, text: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while text not in self.stderr():
            assert self.proc.poll() is None, f"exited before logging {text!r}: {self.stderr()[-3000:]}"
            assert time.monotonic() < deadline, f"never logged {text!r}: {self.stderr()[-3000:]}"
            time.sleep(0.05)

    def result(self) -> dict[str, Any]:
        out, _ = self.proc.communicate(timeout=DEADLINE)
        self.err.close()
        assert self.proc.returncode == 0, self.stderr()[-3000:]
        return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.err.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()


def wait_for(path: Path) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def wait_stopped(pid: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "worker never stopped"
        time.sleep(0.02)


def effects(s: LeaseSpec) -> int:
    return sum(Provider(s.provider, s.provider_mode).count_effects().values())  # type: ignore[arg-type]


def provider_requests(s: LeaseSpec, kind: str) -> int:
    return Provider(s.provider, s.provider_mode).count_requests(kind)  # type: ignore[arg-type]


def ledger_rows(s: LeaseSpec) -> list[dict[str, Any]]:
    with sqlite3.connect(s.db) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM effect_operations")]


def audit(s: LeaseSpec) -> list[dict[str, Any]]:
    with sqlite3.connect(s.db) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM effect_audit ORDER BY op_id, seq")]


def lease_spec(tmp_path: Path, **kw: Any) -> LeaseSpec:
    return LeaseSpec(
        db=str(tmp_path / "agent.sqlite"),
        provider=str(tmp_path / "provider.sqlite"),
        marker=str(tmp_path / "sending"),
        release=str(tmp_path / "release"),
        **kw,
    )


def only_a_sent(s: LeaseSpec, a_pid: int, out_a: dict[str, Any], out_b: dict[str, Any]) -> None:
    """After A (the stalled sender) and B (its waiting resumer) both ended: one effect,
    sent by A; B never sent. Both runs started from the same checkpoint, so only one
    of them may save the next (one runner per thread): normally A, and B, once it
    stopped waiting, is refused with ``ThreadConflictError``. If B's replay of A's
    recorded outcome happens to save first, A is the one refused. Either way the
    thread holds A's answer."""
    assert effects(s) == 1 and provider_requests(s, "apply") == 1
    assert (out_a["sends"], out_b["sends"]) == (1, 0)  # B's tool body never ran
    [row] = ledger_rows(s)
    assert row["state"] == "confirmed" and row["attempts"] == 1
    assert json.loads(row["evidence"])["sender"]["pid"] == a_pid
    assert [e["event"] for e in audit(s)] == ["intent", "succeed"]  # never lost, never re-sent
    assert (out_a["outcome"], out_b["outcome"]) in {("ok", "refused"), ("refused", "ok")}
    # The run that advanced the thread carries A's answer (B's only by replay).
    winner = out_a if out_a["outcome"] == "ok" else out_b
    [message] = [m for m in winner["messages"] if m["type"] == "tool"]
    assert message["content"].endswith(f"by {a_pid}")
    assert winner["messages"][-1]["content"] == "done"


def test_paused_owner_on_the_same_host_is_waited_for(tmp_path: Path, workers: list[Worker]) -> None:
    """3a: A is SIGSTOPped mid-dispatch past its 2 s lease; B resumes and must wait
    (A's process is provably alive), not mark it lost, look it up and re-send."""
    s = lease_spec(tmp_path, contract="lookup", provider_mode="lookup", lease_seconds=2.0)
    a = Worker(replace(s, stall="stop"), tmp_path, "a")
    workers.append(a)
    a_pid = wait_for(Path(s.marker))["pid"]
    wait_stopped(a_pid)
    [row] = ledger_rows(s)
    assert row["state"] == "dispatched"
    # Past the lease by the clock: before the fix, B took over here.
    while time.time() <= row["lease_expires_at"] + 0.5:
        time.sleep(0.05)

    b = Worker(replace(s, resume=True), tmp_path, "b")
    workers.append(b)
    b.wait_log("waiting for operation")
    [row] = ledger_rows(s)
    assert row["state"] == "dispatched" and row["lease_expires_at"] < time.time()
    assert effects(s) == 0 and provider_requests(s, "get") == 0  # B neither looked up nor sent

    os.kill(a_pid, signal.SIGCONT)
    out_a, out_b = a.result(), b.result()
    assert out_b["pid"] != a_pid
    only_a_sent(s, a_pid, out_a, out_b)
    # Who sent: the ledger's result evidence names A's process.
    [row] = ledger_rows(s)
    assert json.loads(row["evidence"]) == {
        "kind": "result",
        "sender": {"host": json.loads(row["evidence"])["sender"]["host"], "pid": a_pid},
    }


@pytest.mark.parametrize("other_host", [False, True], ids=["same-host", "other-host"])
def test_blocked_event_loop_does_not_lapse_the_lease(
    tmp_path: Path, workers: list[Worker], other_host: bool
) -> None:
    """3b: A's async tool blocks its event loop for several leases. On the same host B
    sees A alive; from another host B sees the lease kept fresh by A's heartbeat
    thread. Either way B waits, never sends, and there is exactly one effect."""
    s = lease_spec(tmp_path, contract="lookup", provider_mode="lookup", lease_seconds=1.0)
    a = Worker(replace(s, stall="block"), tmp_path, "a", host="host-a" if other_host else None)
    workers.append(a)
    marker = wait_for(Path(s.marker))
    a_pid, blocked_at = marker["pid"], marker["at"]
    [row] = ledger_rows(s)
    first_expiry = row["lease_expires_at"]

    b = Worker(replace(s, resume=True), tmp_path, "b", host="host-b" if other_host else None)
    workers.append(b)
    b.wait_log("waiting for operation")
    # Blocked for three leases, while B watches.
    while time.time() < max(blocked_at, first_expiry) + 3 * s.lease_seconds:
        time.sleep(0.05)
    [row] = ledger_rows(s)
    assert row["state"] == "dispatched"
    if other_host:
        assert row["lease_expires_at"] > first_expiry  # renewed while the loop was blocked
    assert effects(s) == 0 and provider_requests(s, "get") == 0

    Path(s.release).write_text("go")
    out_a, out_b = a.result(), b.result()
    only_a_sent(s, a_pid, out_a, out_b)


# -- a failed intent commit ------------------------------------------------------------


async def test_failed_intent_commit_releases_its_lease(tmp_path: Path) -> None:
    """5: the node's intents (the keyed call, dispatched at once, and the blind call,
    staged ``pending``) are one transaction, and the ledger refuses it. Nothing is
    written and nothing sent, and the dispatch owner made for the keyed call is
    released with the failure (this process holds nothing of the run): a resume sends
    each call once, without waiting out a 600 s lease."""
    db = tmp_path / "agent.sqlite"
    keyed = Provider(tmp_path / "keyed.sqlite", "dedup")
    blind = Provider(tmp_path / "blind.sqlite", "blind")
    calls = [
        {"name": "send", "args": {"operation": "send:0"}, "id": "call-0", "type": "tool_call"},
        {"name": "note", "args": {"operation": "note:0"}, "id": "call-1", "type": "tool_call"},
    ]

    @tool
    def send(operation: str) -> str:
        """Send (dedup provider)."""
        return keyed.apply({"operation": operation}, key=current_operation().provider_key).effect_id

    @tool
    def note(operation: str) -> str:
        """Write a note (blind provider)."""
        return blind.apply({"operation": operation}).effect_id

    def model(state: State) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done", id="final")]}
        return {"messages": [AIMessage("", tool_calls=calls, id="ai-1")]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node(
        "tools",
        EffectToolNode([send, note], effects={"send": Effect(dedup_window=3600)}, lease_seconds=600),
    )
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    config: Any = {"configurable": {"thread_id": "t1"}}

    async with AsyncEffectSqliteSaver.from_conn_string(str(db)) as saver:
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        with sqlite3.connect(db) as conn:  # the ledger refuses the second commit
            conn.execute(
                "CREATE TRIGGER refuse_blind BEFORE INSERT ON effect_operations "
                "WHEN NEW.contract = 'blind' BEGIN "
                "SELECT RAISE(ABORT, 'attempt to write a readonly database'); END"
            )
        held_before = set(lease._held)
        with pytest.raises(LedgerUnavailableError, match="read-only"):
            await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")

        assert await saver.ledger.list_operations(OperationQuery()) == []  # nothing half-written
        assert set(lease._held) <= held_before  # nothing of this run is held in this process
        assert keyed.count_effects() == {} and blind.count_effects() == {}

        with sqlite3.connect(db) as conn:
            conn.execute("DROP TRIGGER refuse_blind")
        started = time.time()
        await graph.ainvoke(None, config, durability="sync")
        ops = {op.tool: op for op in await saver.ledger.list_operations(OperationQuery())}
        trail = await saver.ledger.audit(ops["send"].op_id)

    assert time.time() - started < 60  # no lease was waited out
    assert [e.event for e in trail] == ["intent", "succeed"]
    assert keyed.count_effects() == {"send:0": 1} and blind.count_effects() == {"note:0": 1}


# -- same-host liveness, process by process ---------------------------------------------



def test_liveness_follows_the_dispatch_not_the_clock() -> None:
    """Held while the process runs or is stopped; gone once it is SIGKILLed, or as soon
    as it released the dispatch although the process lives on."""
    proc, owner = start_holder("hold")
    try:
        assert owner.lock is not None and lease.owner_alive(owner) is True
        proc.send_signal(signal.SIGSTOP)
        wait_stopped(proc.pid)
        assert lease.owner_alive(owner) is True  # stopped is not dead
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
        assert lease.owner_alive(owner) is False  # the kernel dropped the lock
        assert not Path(owner.lock).exists()  # and the prober tidied it up
    finally:
        proc.kill()
        proc.wait()

    proc, owner = start_holder("release")
    try:
        assert proc.poll() is None  # the process is alive ...
        assert lease.owner_alive(owner) is False  # ... but its dispatch is over
    finally:
        proc.kill()
        proc.wait()


_TWICE = """
import json, time
from langgraph_effects._runtime import lease
first = lease.new_owner()
lease.release(first)
second = lease.new_owner()
print(json.dumps([first.to_json(), second.to_json()]), flush=True)
time.sleep(600)
"""


def test_each_dispatch_has_a_lock_file_of_its_own() -> None:
    """A released dispatch's file is gone (over, while its process lives); the next
    dispatch of that process holds a file of its own (running, also while the process
    is stopped); SIGKILL frees it and the prober removes it."""
    from langgraph_effects.core.operation import Owner

    proc = subprocess.Popen([sys.executable, "-c", _TWICE], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first, second = (Owner.from_json(o) for o in json.loads(proc.stdout.readline()))
        assert first.lock is not None and second.lock is not None and second.lock != first.lock
        assert not Path(first.lock).exists()
        assert lease.owner_alive(first) is False
        assert lease.owner_alive(second) is True
        proc.send_signal(signal.SIGSTOP)
        wait_stopped(proc.pid)
        assert lease.owner_alive(second) is True and lease.owner_alive(first) is False
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
        assert lease.owner_alive(second) is False
        assert not Path(second.lock).exists()
    finally:
        proc.kill()
        proc.wait()


def _hold_file(path: Path) -> subprocess.Popen[str]:
    """Another process holding ``path``'s ``flock`` (as a worker holds its lock file)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'r+'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_held_lock_file_stamped_for_another_dispatch_is_not_this_one(tmp_path: Path) -> None:
    """Earlier versions kept one file for many dispatches, stamped with each in turn
    (``idle`` between them): held, it stands only for the dispatch stamped on it."""
    path = tmp_path / "kept.lock"
    path.write_bytes(b"later-token".ljust(64))
    holder = _hold_file(path)
    try:
        assert lease._probe(str(path), "earlier-token") is False
        assert lease._probe(str(path), "later-token") is True
    finally:
        holder.kill()
        holder.wait()
    assert lease._probe(str(path), "later-token") is False


def test_a_held_blank_lock_file_is_a_running_dispatch(tmp_path: Path) -> None:
    """A file with no stamp was made for one dispatch (before files were stamped):
    held means that dispatch runs, whatever token it is asked about."""
    path = tmp_path / "old.lock"
    path.write_bytes(b"")
    holder = _hold_file(path)
    try:
        assert lease._probe(str(path), "any-token") is True
        holder.kill()
        holder.wait()
        assert lease._probe(str(path), "any-token") is False
    finally:
        holder.kill()
        holder.wait()


def test_a_child_forked_while_the_lease_guard_is_held_can_still_dispatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread may hold the module's guard lock at the moment of a fork: the
    child gets a fresh one instead of a copy locked for ever."""
    monkeypatch.setenv("LANGGRAPH_EFFECTS_RUNTIME_DIR", str(tmp_path))
    with lease._held_lock:
        pid = os.fork()
        if pid == 0:  # the child: make and release an owner, then leave at once
            code = 1
            try:
                lease.release(lease.new_owner())
                code = 0
            finally:
                os._exit(code)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child hung on the lease module's lock")
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_without_a_lock_file_a_live_pid_proves_nothing() -> None:
    from langgraph_effects.core.operation import Owner

    proc, owner = start_holder("hold")
    try:
        lockless = Owner(host=owner.host, pid=owner.pid, started=owner.started, token="t")
        assert lease.owner_alive(lockless) is None  # the clock decides
        recycled = Owner(host=owner.host, pid=owner.pid, started=owner.started + 1, token="t")
        assert lease.owner_alive(recycled) is False  # another process under that pid
    finally:
        proc.kill()
        proc.wait()
    assert lease.owner_alive(lockless) is False  # its process is gone


# -- owners made ahead ---------------------------------------------------------------------


async def _ready_made() -> None:
    for _ in range(500):
        if lease._ready and not lease._making:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no owner was made ahead")


async def test_owners_made_ahead_are_live_only_once_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owners are made ahead on the lease thread (so parallel opens do not wait for
    one each); one is not a dispatch of this process until handed out, it is held
    once handed out, its dispatch begins then, and a changed lock directory retires
    the ones made for the old one."""
    monkeypatch.setenv("LANGGRAPH_EFFECTS_RUNTIME_DIR", str(tmp_path / "a"))
    first = await lease.new_owner_async()
    await _ready_made()
    assert all(owner.token not in lease._held for owner, _, _ in lease._ready)
    assert all(lease.owner_alive(owner) is False for owner, _, _ in lease._ready)
    before = lease.ticks_now()
    second = await lease.new_owner_async()
    assert second.lock is not None and Path(second.lock).parent == tmp_path / "a"
    assert lease.holds(second) and lease.owner_alive(second) is True
    assert second.since is not None and second.since >= before

    monkeypatch.setenv("LANGGRAPH_EFFECTS_RUNTIME_DIR", str(tmp_path / "b"))
    third = await lease.new_owner_async()
    assert third.lock is not None and Path(third.lock).parent == tmp_path / "b"
    for owner in (first, second, third):
        lease.release(owner)
        assert lease.owner_alive(owner) is False
