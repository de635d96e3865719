"""Dispatch leases: who is sending an operation right now, and whether they still live.

A lease is a liveness signal only: it tells a second worker to wait instead of
sending, and it never authorises a re-send. Its owner names the host, the process
(with its start time, so a recycled pid is not mistaken for it) and a token unique
to one dispatch, so that a leftover sibling call in this very process is told
apart from a finished one.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from functools import cache

from .operation import Operation, Owner, State

DEFAULT_LEASE_SECONDS = 30.0

_live_tokens: set[str] = set()
_live_lock = threading.Lock()


@cache
def _host() -> str:
    # LANGGRAPH_EFFECTS_HOST names the worker's host where hostnames are not unique
    # (containers cloned from one image); the tests use it to play "another machine".
    return os.environ.get("LANGGRAPH_EFFECTS_HOST") or socket.gethostname()


def process_start_time(pid: int) -> float | None:
    """The start time of ``pid`` in clock ticks since boot (Linux), or ``None`` if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields after it don't.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return float(fields[19])  # field 22 overall: starttime
    except (IndexError, ValueError):
        return None


def new_owner() -> Owner:
    """An owner for one dispatch by this process, registered as live until released."""
    token = uuid.uuid4().hex
    with _live_lock:
        _live_tokens.add(token)
    # Read each time, not cached: a forked worker must not inherit its parent's identity.
    pid = os.getpid()
    return Owner(host=_host(), pid=pid, started=process_start_time(pid) or 0.0, token=token)


def release(owner: Owner | None) -> None:
    """The dispatch this owner stood for is over (whatever its outcome)."""
    if owner is not None:
        with _live_lock:
            _live_tokens.discard(owner.token)


def owner_alive(owner: Owner) -> bool | None:
    """``False`` if the owner is provably gone, ``True`` if provably alive, ``None`` if we
    cannot tell (another host): then only the lease's expiry counts."""
    if owner.host != _host():
        return None
    if owner.pid == os.getpid():
        with _live_lock:
            return owner.token in _live_tokens
    start = process_start_time(owner.pid)
    if start is None:
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return None
    return start == owner.started


def lease_expired(op: Operation, *, now: float | None = None) -> bool:
    """Whether a ``dispatched`` operation's sender is gone: its owner died or the lease ran out."""
    if op.state is not State.DISPATCHED:
        return False
    if op.owner is not None and owner_alive(op.owner) is False:
        return True
    return not op.lease_live(time.time() if now is None else now)
