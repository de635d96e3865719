"""What ``/proc`` tells a resumer about a dispatch's processes on this host (Linux).

Three facts the lease module builds on:

* **Which kernel and pid namespace a process runs in** (`node_id`): a pid and
  a start time name a process only there. Containers cloned from one image may
  share a hostname; a lease written in another one must not be judged by our pids.
* **Which processes descend from a worker**, even after it died. Every process that
  imports this package appends itself (``pid:start``) to the environment variable
  `LINEAGE_VAR`; children inherit the environment whatever starts them
  (``subprocess.run`` with its defaults, ``os.system``,
  ``asyncio.create_subprocess_exec``, a shell and its children), so
  `live_descendant` finds a dead worker's children by reading
  ``/proc/<pid>/environ``. An inherited lock fd would not do: ``subprocess`` closes
  every fd but 0, 1 and 2 in the child by default. A process group would not either:
  a worker is rarely a group leader, and its group holds its siblings too.
* **Which file a live process holds open** (`open_file_of`): a lock file
  removed from its directory (a tmp cleaner, logind removing ``$XDG_RUNTIME_DIR``
  at logout) is still reachable through ``/proc/<pid>/fd`` of the process holding it.

Everything here answers ``None`` where ``/proc`` does not tell (another OS, another
user's process); the callers then fall back to what they can prove otherwise.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Literal

#: Who a process descends from, oldest first: ``pid:start`` of each process that
#: imported this package, this process last. Inherited by every child that keeps
#: the environment; a tool that starts a child with ``env={...}`` should pass it on.
LINEAGE_VAR = "LANGGRAPH_EFFECTS_LINEAGE"
_LINEAGE_DEPTH = 8  # ancestors kept: enough for a worker, its launcher and a shell or two


def _stat(pid: int) -> tuple[str, float] | None:
    """``pid``'s state letter and start time (ticks since boot), or ``None`` if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields after it don't.
    fields = stat_line[stat_line.rfind(")") + 2 :].split()
    try:
        return fields[0], float(fields[19])  # fields 3 and 22 overall: state, starttime
    except (IndexError, ValueError):
        return None


def process_start_time(pid: int) -> float | None:
    """The start time of ``pid`` in clock ticks since boot (Linux), or ``None`` if unknown.
    A process that exited but was not reaped yet (a zombie) still has one: see
    `live_start_time`."""
    found = _stat(pid)
    return found[1] if found is not None else None


def live_start_time(pid: int) -> float | None:
    """`process_start_time` of a process that still runs: ``None`` also once it
    exited, while its parent has not reaped it yet (a zombie, state ``Z`` or ``X``).

    A SIGKILLed worker is such a zombie until its supervisor waits for it, which a busy
    or careless one (a shell script, a container's PID 1 without an init) may do late
    or never: its pid and start time read as before, but it holds no lock and sends
    nothing. Judged alive, its dispatch looked released by a live owner, and the
    children it left sending were not waited for.
    """
    found = _stat(pid)
    if found is None or found[0] in ("Z", "X", "x"):
        return None
    return found[1]


@cache
def node_id(pid: int) -> str | None:
    """The kernel (boot id) and pid namespace ``pid`` (this process) runs in, as
    ``"<boot id>/<pid namespace inode>"``; ``None`` where ``/proc`` does not tell.
    Keyed by pid so a forked child asks again."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}/{namespace}"


def mark_lineage() -> None:
    """Append this process to `LINEAGE_VAR` in its environment (once per process:
    at import, and in a forked child), so the children it starts carry it."""
    pid = os.getpid()
    start = process_start_time(pid)
    if start is None:
        return
    me = f"{pid}:{int(start)}"
    entries = os.environ.get(LINEAGE_VAR, "").split()
    if entries and entries[-1] == me:
        return
    os.environ[LINEAGE_VAR] = " ".join([*entries, me][-_LINEAGE_DEPTH:])


def _carries(environ: bytes, mark: bytes) -> bool:
    prefix = LINEAGE_VAR.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return mark in entry[len(prefix) :].split()
    return False


def live_descendant(pid: int, started: float, since: float) -> int | None:
    """A live process started at or after ``since`` (ticks since boot) that descends
    from the process ``pid`` started at ``started``, or ``None``. Zombies do not count
    (their environment reads empty); processes of other users cannot be read.

    Reads ``/proc/<pid>/stat`` of every process, and the environment of those that
    started late enough: about 2 ms per 100 processes.
    """
    mark = f"{pid}:{int(started)}".encode()
    # A start time is truncated to a whole tick: a child forked in the tick ``since``
    # falls in reads as that tick's start (one more of slack, the safe side).
    earliest = int(since) - 1
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit() or int(name) in (me, pid):
            continue
        start = process_start_time(int(name))
        if start is None or start < earliest:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if _carries(environ, mark):
            return int(name)
    return None


def open_file_of(pid: int, path: str) -> str | Literal[False] | None:
    """A ``/proc/<pid>/fd/<n>`` link through which ``pid`` holds the file opened as
    ``path`` (also once ``path`` was removed); ``False`` if its open files were read
    and that one is not among them; ``None`` if they are not ours to look at.
    Opening the link opens that very file.

    Matched by the file's name, which must be unique (the lock files' are random):
    the link shows the path as seen from this process's mount namespace, which may
    differ from the owner's (``PrivateTmp=`` services)."""
    name_of = "/" + os.path.basename(path)
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return None
    for name in names:
        try:
            target = os.readlink(f"{fds}/{name}")
        except FileNotFoundError:
            continue  # closed meanwhile
        except OSError:
            return None
        if target.removesuffix(" (deleted)").endswith(name_of):
            return f"{fds}/{name}"
    return False
