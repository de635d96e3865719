"""What a live dispatch covers on one host: the processes its tool started, a lock
file removed under it, and nothing of another container that shares the host name.

Real processes throughout: worker A dispatches and is SIGKILLed or stopped, worker
B resumes the thread; effects are counted at a provider that keeps its own records.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
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

from langgraph_effects._runtime import lease, processes
from langgraph_effects.core.operation import Operation, Owner, State
from tests import test_leases
from tests.helpers.holder import start_holder
from tests.test_leases import (
    ROOT,
    Worker,
    audit,
    effects,
    lease_spec,
    ledger_rows,
    only_a_sent,
    provider_requests,
    wait_for,
    wait_stopped,
)

pytestmark = [pytest.mark.crash, pytest.mark.slow]

workers = test_leases.workers  # the fixture: the workers a test started, killed at its end


@pytest.fixture
def strays() -> Iterator[list[int]]:
    """Pids of processes a test started indirectly (a killed worker's child): killed
    at the end if still there, so a failing test leaves nothing sending."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def past(moment: float) -> None:
    while time.time() <= moment:
        time.sleep(0.05)


def owner_of(row: dict[str, Any]) -> Owner:
    return Owner.from_json(json.loads(row["owner"]))


# -- a tool's child outlives its killed worker ------------------------------------------


@pytest.mark.parametrize("how", ["run", "system", "asyncio"])
def test_a_child_still_sending_when_its_worker_is_killed_is_waited_for(
    tmp_path: Path, workers: list[Worker], strays: list[int], how: str
) -> None:
    """A's tool shells out (``subprocess.run`` with its defaults, ``os.system``,
    ``asyncio.create_subprocess_exec``) and the child is still sending when A is
    SIGKILLed. B must not take over while the child lives (before: B took over
    within a second or two, found nothing landed, re-sent; 2 effects, one confirmed
    operation in the ledger). Once the child's request landed and it exited, B
    takes over and the lookup confirms it: 1 effect, never re-sent."""
    s = lease_spec(tmp_path, contract="lookup", provider_mode="lookup", lease_seconds=1.0)
    a = Worker(replace(s, stall=f"child:{how}"), tmp_path, "a")
    workers.append(a)
    child = wait_for(Path(s.marker + ".child"))["pid"]
    strays.append(child)
    a.proc.kill()  # SIGKILL, as the OOM killer picks the big Python process
    a.proc.wait()
    killed_at = time.time()
    assert running(child)

    b = Worker(replace(s, resume=True), tmp_path, "b")
    workers.append(b)
    b.wait_log("it started during the dispatch still runs")
    b.wait_log("waiting for operation")
    past(killed_at + 3 * s.lease_seconds)  # A is dead and its lease long expired
    [row] = ledger_rows(s)
    assert row["state"] == "dispatched" and row["lease_expires_at"] < time.time()
    assert effects(s) == 0 and provider_requests(s, "get") == 0  # B neither looked up nor sent

    Path(s.release).write_text("go")  # the child's request lands, then it exits
    out_b = b.result()
    assert not running(child)
    assert effects(s) == 1 and provider_requests(s, "apply") == 1
    assert out_b["sends"] == 0
    [row] = ledger_rows(s)
    assert row["state"] == "confirmed" and row["attempts"] == 1
    assert [e["event"] for e in audit(s)] == ["intent", "lose", "confirm"]
    assert out_b["messages"][-1]["content"] == "done"


@pytest.fixture
def load() -> Iterator[None]:
    """Four busy loops beside the test (the report's machine ran at load 6), each
    bounded in time and killed at the end."""
    code = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end: pass"
    busy = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    yield
    for proc in busy:
        proc.kill()
        proc.wait()


def test_a_child_of_a_killed_worker_not_yet_reaped_is_waited_for(
    tmp_path: Path, workers: list[Worker], strays: list[int], load: None
) -> None:
    """Issue 42 item 4, as reported: a lookup tool awaits its child, the worker is
    SIGKILLed while the child runs and B resumes at once, under load, before anyone
    reaped A. A killed process is a zombie until its parent waits for it: its pid and
    start time read as before, but its lock is gone. Read as a live owner that had
    released its dispatch, its child was not waited for: B looked up (absent) and
    re-sent, then the child sent (2 effects). A zombie is dead: B waits for the child."""
    s = lease_spec(tmp_path, contract="lookup", provider_mode="lookup", lease_seconds=1.0)
    a = Worker(replace(s, stall="child:asyncio"), tmp_path, "a")
    workers.append(a)
    child = wait_for(Path(s.marker + ".child"))["pid"]
    strays.append(child)
    os.kill(a.proc.pid, signal.SIGKILL)  # nobody waits for A yet: it stays a zombie
    b = Worker(replace(s, resume=True), tmp_path, "b")
    workers.append(b)
    deadline = time.monotonic() + 120
    while b.proc.poll() is None and "it started during the dispatch still runs" not in b.stderr():
        assert time.monotonic() < deadline, b.stderr()[-3000:]
        time.sleep(0.05)
    assert Path(f"/proc/{a.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    Path(s.release).write_text("go")  # the child sends only now: after B decided
    out_b = b.result()
    deadline = time.monotonic() + 60
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert effects(s) == 1 and provider_requests(s, "apply") == 1  # before: 2 (B, then the child)
    assert out_b["sends"] == 0
    assert [e["event"] for e in audit(s)] == ["intent", "lose", "confirm"]


_ZOMBIE = """
import asyncio, json, multiprocessing, os, signal, subprocess, sys, time
from langgraph_effects._runtime import lease

def sleeper() -> None:
    time.sleep(600)

async def start(how: str) -> None:
    if how == "asyncio exec":
        await asyncio.create_subprocess_exec("sleep", "600")
    else:
        await asyncio.create_subprocess_shell("sleep 600; true")

if __name__ == "__main__":
    how = sys.argv[1]
    owner = lease.new_owner()
    if how == "subprocess":
        subprocess.Popen(["sleep", "600"])
    elif how == "shell":
        subprocess.Popen("sleep 600; true", shell=True)
    elif how == "os.system":
        os.system("sleep 600 &")
    elif how.startswith("asyncio"):
        asyncio.run(start(how))
    else:
        multiprocessing.get_context("fork").Process(target=sleeper).start()
    time.sleep(0.3)
    kids, look = [], [os.getpid()]
    while look:
        pid = look.pop()
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found = [int(p) for p in f.read().split()]
            kids += found
            look += found
    mark = f"{os.getpid()}:{int(owner.started)}".encode()
    for name in os.listdir("/proc"):  # os.system's "&": its child was reparented
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                lineage = [e for e in f.read().split(b"\\0") if e.startswith(b"LANGGRAPH_EFFECTS_LINEAGE=")]
        except OSError:
            continue
        if name.isdigit() and int(name) not in kids and lineage and mark in lineage[0].split():
            kids.append(int(name))
    print(json.dumps({"owner": owner.to_json(), "kids": kids}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(
    "how", ["subprocess", "shell", "os.system", "asyncio exec", "asyncio shell", "fork"]
)
def test_a_killed_owner_not_yet_reaped_is_dead_and_its_children_hold_the_dispatch(
    tmp_path: Path, strays: list[int], how: str
) -> None:
    """Every way of starting a child docs/leases.md lists: the owner SIGKILLs itself
    and this process, its parent, does not reap it (a zombie). Its dispatch runs while
    its child lives (before: over at once, "alive and released"); the zombie itself
    holds nothing once the children are gone."""
    env = {**os.environ, "LANGGRAPH_EFFECTS_RUNTIME_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _ZOMBIE, how], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        seen = json.loads(proc.stdout.readline())
        owner, kids = Owner.from_json(seen["owner"]), [int(pid) for pid in seen["kids"]]
        strays.extend(kids)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the owner never died"
            time.sleep(0.02)
        assert kids and all(running(pid) for pid in kids)
        assert lease.owner_alive(owner) is True
        for pid in kids:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(running(pid) for pid in kids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.owner_alive(owner) is False  # a zombie holds nothing
    finally:
        proc.kill()
        proc.wait()


_SPAWNER = """
import json, subprocess, sys, time
from langgraph_effects._runtime import lease
before = subprocess.Popen(["sleep", "600"])  # a helper started before the dispatch
time.sleep(0.1)  # start times have a 10 ms grain: one that close counts as the dispatch's
owner = lease.new_owner()
shell = subprocess.Popen(["sh", "-c", "sleep 600; true"])  # started by the dispatch
time.sleep(0.3)  # the shell has started its sleep
print(json.dumps({"owner": owner.to_json(), "before": before.pid, "shell": shell.pid}), flush=True)
time.sleep(600)
"""


def test_a_dispatch_lives_in_its_grandchildren_not_in_older_helpers(strays: list[int]) -> None:
    """The owner's process is killed: its dispatch runs on in a shell's child started
    during it, and is over the moment that one is gone, although a helper the
    process started before the dispatch still runs."""
    proc = subprocess.Popen([sys.executable, "-c", _SPAWNER], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen = json.loads(proc.stdout.readline())
        owner, before, shell = Owner.from_json(seen["owner"]), seen["before"], seen["shell"]
        [grandchild] = [int(p) for p in Path(f"/proc/{shell}/task/{shell}/children").read_text().split()]
        strays.extend([before, shell, grandchild])
        proc.kill()
        proc.wait()
        assert lease.owner_alive(owner) is True
        os.kill(shell, signal.SIGKILL)  # the shell goes first: its child still sends
        assert lease.owner_alive(owner) is True
        os.kill(grandchild, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while running(grandchild) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running(before)
        assert lease.owner_alive(owner) is False  # the older helper does not hold it
    finally:
        proc.kill()
        proc.wait()


_FORKER = """
import json, os, time
from langgraph_effects._runtime import lease

def fork() -> int:
    pid = os.fork()
    if pid == 0:  # a child that does not exec (multiprocessing's fork, os.fork)
        time.sleep(600)
        os._exit(0)
    return pid

before = fork()
time.sleep(0.1)
owner = lease.new_owner()
during = fork()
time.sleep(0.3)
print(json.dumps({"owner": owner.to_json(), "before": before, "during": during}), flush=True)
time.sleep(600)
"""


def test_a_dispatch_lives_in_a_child_forked_without_exec(tmp_path: Path, strays: list[int]) -> None:
    """A forked child shows its parent's start-up environment, not its lineage: it
    holds a file of its own instead. The dispatch it was forked during runs while it
    lives; a child forked before the dispatch does not hold it."""
    env = {**os.environ, "LANGGRAPH_EFFECTS_RUNTIME_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORKER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        seen = json.loads(proc.stdout.readline())
        owner, before, during = Owner.from_json(seen["owner"]), seen["before"], seen["during"]
        strays.extend([before, during])
        proc.kill()
        proc.wait()
        assert lease.owner_alive(owner) is True
        os.kill(during, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while running(during) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running(before)
        assert lease.owner_alive(owner) is False
    finally:
        proc.kill()
        proc.wait()


def test_children_of_a_live_owner_do_not_hold_a_released_dispatch(strays: list[int]) -> None:
    """The children count only once the owner's process is gone: a live one that
    released its dispatch ended it, whatever it started since (a busy worker keeps
    starting children; its resumers would never see a gap)."""
    script = _SPAWNER.replace("time.sleep(0.3)", "lease.release(owner); time.sleep(0.3)")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen = json.loads(proc.stdout.readline())
        shell = seen["shell"]
        children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
        strays.extend([seen["before"], shell, *(int(p) for p in children)])
        assert lease.owner_alive(Owner.from_json(seen["owner"])) is False
    finally:
        proc.kill()
        proc.wait()


# -- the lock directory removed under a live dispatch -----------------------------------


def test_a_lock_directory_removed_under_a_live_dispatch_is_not_a_release(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """A is stopped mid-dispatch (no heartbeat, its lease runs out) and its lock
    directory is removed, as logind removes ``$XDG_RUNTIME_DIR`` at logout. A missing
    file is not a release: B finds the file among A's open files, held and stamped,
    and waits (before: B took over at once and re-sent; 2 effects)."""
    runtime = tmp_path / "run"
    env = {"LANGGRAPH_EFFECTS_RUNTIME_DIR": str(runtime)}
    s = lease_spec(tmp_path, contract="lookup", provider_mode="lookup", lease_seconds=1.0)
    a = Worker(replace(s, stall="stop"), tmp_path, "a", env=env)
    workers.append(a)
    a_pid = wait_for(Path(s.marker))["pid"]
    wait_stopped(a_pid)
    [row] = ledger_rows(s)
    lock = owner_of(row).lock
    assert lock is not None and Path(lock).parent == runtime
    shutil.rmtree(runtime)
    past(row["lease_expires_at"] + 0.5)

    b = Worker(replace(s, resume=True), tmp_path, "b", env=env)
    workers.append(b)
    b.wait_log("waiting for operation")
    time.sleep(2 * s.lease_seconds)
    [row] = ledger_rows(s)
    assert row["state"] == "dispatched" and row["lease_expires_at"] < time.time()
    assert effects(s) == 0 and provider_requests(s, "get") == 0

    os.kill(a_pid, signal.SIGCONT)
    out_a, out_b = a.result(), b.result()
    only_a_sent(s, a_pid, out_a, out_b)




def test_a_removed_lock_file_is_judged_through_its_owner(tmp_path: Path) -> None:
    """Removed, the file is still the owner's: running while held and stamped, over
    once released (no longer among its open files) or once its process is killed."""
    proc, owner = start_holder("hold", tmp_path / "held")
    released, done = start_holder("release", tmp_path / "released")
    try:
        shutil.rmtree(tmp_path / "held")
        shutil.rmtree(tmp_path / "released")
        assert lease.owner_alive(owner) is True
        assert lease.owner_alive(done) is False  # closed by its owner: over
        proc.kill()
        proc.wait()
        assert lease.owner_alive(owner) is False
    finally:
        for p in (proc, released):
            p.kill()
            p.wait()


# -- another container under the same host name -----------------------------------------


def test_an_owner_in_another_container_under_our_hostname_is_judged_by_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Same host name, another boot id or pid namespace: its pid and lock file say
    nothing here (that pid may be another process, the path another file), so
    neither a live nor a dead one is believed; the lease's expiry decides."""
    here = processes.node_id(os.getpid())
    assert here is not None
    boot, namespace = here.split("/")
    proc, owner = start_holder("hold")
    other_boot = replace(owner, node=f"00000000-0000-0000-0000-000000000000/{namespace}")
    other_pid_ns = replace(owner, node=f"{boot}/1")
    try:
        assert lease.owner_alive(owner) is True
        with caplog.at_level(logging.WARNING, logger="langgraph_effects"):
            assert lease.owner_alive(other_boot) is None
            assert lease.owner_alive(other_pid_ns) is None
        assert "LANGGRAPH_EFFECTS_HOST" in caplog.text
    finally:
        proc.kill()
        proc.wait()
    assert lease.owner_alive(owner) is False  # dead, here
    assert lease.owner_alive(other_boot) is None  # not judged by our pid
    op = Operation(
        op_id="op_x",
        thread_id="t",
        tool="send",
        tool_call_id="c",
        args={},
        args_hash="h",
        provider_key="k",
        contract="lookup",
        state=State.DISPATCHED,
        owner=other_boot,
        lease_expires_at=time.time() + 60,
    )
    assert not lease.lease_expired(op)
    assert lease.lease_expired(replace(op, lease_expires_at=time.time() - 1))


def test_a_killed_worker_of_another_container_is_waited_out_by_its_lease(
    tmp_path: Path, workers: list[Worker]
) -> None:
    """A's row names our host but another container (written here by editing its
    owner's node, as a clone sharing our hostname would). A is SIGKILLed before
    sending: a local check would call it dead at once; B instead waits for the lease
    A's heartbeat kept renewing to run out, then takes over and sends once."""
    s = lease_spec(tmp_path, contract="lookup", provider_mode="lookup", lease_seconds=8.0)
    a = Worker(replace(s, stall="block"), tmp_path, "a")
    workers.append(a)
    wait_for(Path(s.marker))
    with sqlite3.connect(s.db) as db:
        db.execute("UPDATE effect_operations SET owner = json_set(owner, '$.node', 'another-boot/1')")
    a.proc.kill()
    a.proc.wait()
    [row] = ledger_rows(s)
    assert owner_of(row).node == "another-boot/1" and row["lease_expires_at"] > time.time()

    b = Worker(replace(s, resume=True), tmp_path, "b")
    workers.append(b)
    out_b = b.result()
    assert "another container or boot" in b.stderr()
    lost = next(e for e in audit(s) if e["event"] == "lose")
    # Not a moment before its lease ran out (judged locally: at once, "owner gone").
    assert lost["at"] >= row["lease_expires_at"]
    assert json.loads(lost["evidence"])["why"] == "lease expired"
    assert effects(s) == 1 and provider_requests(s, "apply") == 1 and out_b["sends"] == 1
    assert [e["event"] for e in audit(s)] == ["intent", "lose", "resend", "succeed"]
