"""Dispatch leases: who is sending an operation right now, and whether they still live.

A lease is a liveness signal only: it tells a second worker to wait instead of
sending, and it never authorises a re-send. Its owner names the host, the process
(with its start time, so a recycled pid is not mistaken for it) and a token unique
to one dispatch.

**Same host: liveness is proved by the kernel, not by a clock.** While a dispatch
runs, its owner holds an exclusive ``flock`` on a file of its own in a per-user
runtime directory (`runtime_dir`), stamped with the dispatch's token. The kernel
keeps the lock while the process is stopped (SIGSTOP), paused by a debugger, or has
its event loop blocked, and drops it the instant the process dies (SIGKILL
included). A resumer on the same host tries a non-blocking lock: held and stamped
with the token means the dispatch is still running (wait, however long it takes);
free, missing, or stamped otherwise means it is over (take over at once). The file
is removed when the dispatch ends, so a resumer never waits for a dispatch that was
cancelled long ago. That file work runs off the event loop, on the lease thread: an
event loop takes an owner made ahead there (`ready_owner`), or waits for one.

**A live dispatch includes the processes its tool started.** Once the owner's
process is gone, a process it started since the dispatch began (a ``gh`` or
``kubectl`` the tool shelled out to, still sending) keeps the dispatch running;
`processes` finds them by the lineage every process of this
package leaves in its children's environment. A lock file removed from its
directory is not a release: it is looked for among the live owner's open files.
An owner that names this host but another kernel or pid namespace (a container
clone sharing the hostname) is not judged by local pids at all: its lease expires
by time, as another host's (``docs/leases.md``).

**Across hosts only time can tell:** the lease expires unless its owner renews it
(`langgraph_effects._runtime.heartbeat`). Whether a holder is gone is decided by
`langgraph_effects.core.protocol.holder_gone` from the facts gathered here.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import fcntl
import logging
import os
import socket
import stat
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import NamedTuple

from ..core import protocol
from ..core.operation import Operation, Owner, State
from . import processes
from .processes import process_start_time

DEFAULT_LEASE_SECONDS = 30.0

log = logging.getLogger("langgraph_effects")


class _LockFile(NamedTuple):
    """The lock file a running dispatch of this process holds (``flock``), stamped
    with its token."""

    fd: int
    path: str


#: A stamp's size: a token, padded. Written whole at offset 0 of a file of that size.
_STAMP_SIZE = 64

#: token -> the lock file of that dispatch (``None`` without one), for every dispatch
#: of this process not yet released.
_held: dict[str, _LockFile | None] = {}
_held_lock = threading.Lock()

#: The lease thread: lock-file work from event-loop code (removing the files
#: `release_soon` hands it, making owners ahead), in order, off the loop. Made on
#: first use, and afresh in a forked child (threads do not fork).
_worker: ThreadPoolExecutor | None = None

#: Owners made ahead on the lease thread (see `ready_owner`), each with its lock file
#: and the runtime directory it was made for; not dispatches of this process (not in
#: ``_held``) until taken.
_ready: list[tuple[Owner, _LockFile | None, tuple[str | None, ...]]] = []
_READY = 8
_making = False


def _forget_in_child() -> None:
    # A forked child shares its parent's locks (same open file descriptions): closing
    # its copies keeps every dispatch of a dead parent from looking alive while the
    # child runs; it says whose child it is, and since when, with a file of its own.
    # The guard lock is made anew: another thread of the parent may have held it.
    global _held_lock, _worker, _making
    _held_lock = threading.Lock()
    _worker, _making = None, False
    for lock in [*_held.values(), *(lock for _, lock, _ in _ready)]:
        if lock is not None:
            with contextlib.suppress(OSError):
                os.close(lock.fd)
    _held.clear()
    _ready.clear()
    parent = os.environ.get(processes.LINEAGE_VAR, "").split()[-1:]
    processes.mark_lineage()  # the child's children descend from it too
    if parent:
        _mark_forked(parent[0])


#: A forked child's mark (see `_mark_forked`), held open until it exits.
_forked_fd: int | None = None


def _mark_forked(parent: str) -> None:
    """Say that this process was forked (without exec) by ``parent`` (``pid:start``).

    Its ``/proc/<pid>/environ`` shows the environment its parent was started with,
    without the parent's lineage, so `processes.live_descendant` cannot find
    it: a lock file ``fork-<parent>-<start>-<pid>.lock`` held until it exits (and by
    its own forks, which share it) does. Best effort: nothing here may fail a fork.
    """
    global _forked_fd
    start = process_start_time(os.getpid())
    directory = runtime_dir() if start is not None else None
    if directory is None:
        return
    path = directory / f"fork-{parent}-{int(start or 0)}-{os.getpid()}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return
    _forked_fd = fd


def _forked_child(owner: Owner, earliest: float) -> int | None:
    """A live child the owner forked without exec at or after tick ``earliest`` (its
    pid, from the name of the file it holds), or ``None``."""
    directory = Path(owner.lock).parent if owner.lock else runtime_dir()
    if directory is None:
        return None
    for path in directory.glob(f"fork-{owner.pid}:{int(owner.started)}-*.lock"):
        _, start, pid = path.stem.rsplit("-", 2)
        if not (start.isdigit() and pid.isdigit()) or int(start) < int(earliest) - 1:
            continue  # forked before the dispatch began (10 ms grain: one tick of slack)
        if _probe(str(path)):  # held; a free one is removed
            return int(pid)
    return None


processes.mark_lineage()
os.register_at_fork(after_in_child=_forget_in_child)


@atexit.register
def _close_all() -> None:
    # A normal exit removes this process's lock files (a killed one leaves them free,
    # for the next prober or sweep to remove).
    with _held_lock:
        locks = [*_held.values(), *(lock for _, lock, _ in _ready)]
        _held.clear()
        _ready.clear()
    for lock in locks:
        if lock is not None:
            _close(lock)


@cache
def _host() -> str:
    # LANGGRAPH_EFFECTS_HOST names the worker's host where hostnames are not unique
    # (containers cloned from one image); the tests use it to play "another machine".
    return os.environ.get("LANGGRAPH_EFFECTS_HOST") or socket.gethostname()


def _runtime_path() -> Path:
    """The lock-file directory the settings name."""
    explicit = os.environ.get("LANGGRAPH_EFFECTS_RUNTIME_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "langgraph-effects"
    return Path(tempfile.gettempdir()) / f"langgraph-effects-{os.getuid()}"


def _runtime_settings() -> tuple[str | None, ...]:
    """What `_runtime_path` depends on, read without touching the file system (the
    first ``tempfile.gettempdir()`` probes directories): an owner made ahead is used
    only while these are what they were when it was made."""
    return (
        os.environ.get("LANGGRAPH_EFFECTS_RUNTIME_DIR"),
        os.environ.get("XDG_RUNTIME_DIR"),
        os.environ.get("TMPDIR"),
        tempfile.tempdir,
    )


def runtime_dir() -> Path | None:
    """Where this user's dispatch lock files live (created ``0700``), or ``None`` if
    no safe directory is available (then liveness falls back to pid + start time).

    ``LANGGRAPH_EFFECTS_RUNTIME_DIR`` overrides it; otherwise ``$XDG_RUNTIME_DIR/
    langgraph-effects`` or ``<tmp>/langgraph-effects-<uid>``. Every worker of one
    deployment on one host must resolve the same directory.
    """
    path = _runtime_path()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as error:
        log.warning("no lease lock directory at %s (%s); using pid liveness only", path, error)
        return None
    # In a shared /tmp another user could have planted the directory (or a symlink).
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        log.warning("%s is not a directory owned by this user; using pid liveness only", path)
        return None
    return path


_swept: set[Path] = set()


def _sweep(directory: Path) -> None:
    """Once per process and directory: remove lock files nobody holds any more (left by
    killed processes whose dispatch no resumer has probed), so they do not pile up."""
    if directory in _swept:
        return
    _swept.add(directory)
    for path in directory.glob("*.lock"):
        _probe(str(path))  # removes it when free
    for path in directory.glob(".*.new"):  # a crash between create and rename
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > 60:
                path.unlink()


def _hold(token: str) -> _LockFile | None:
    """A new lock file in the runtime directory, locked and stamped with ``token``;
    ``None`` if there is no usable directory (then liveness falls back to pid + start
    time)."""
    stamp = token.encode()
    if len(stamp) > _STAMP_SIZE:  # a prober reads that many bytes: it would never match
        raise ValueError(f"a dispatch token is at most {_STAMP_SIZE} bytes")
    directory = runtime_dir()
    if directory is None:
        return None
    _sweep(directory)
    name = uuid.uuid4().hex
    final = directory / f"{name}.lock"
    staging = directory / f".{name}.new"
    try:
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as error:
        log.warning("cannot create lease lock %s (%s); using pid liveness only", staging, error)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(fd, stamp.ljust(_STAMP_SIZE), 0)
        # Published under its final name only once locked and stamped: whoever finds
        # the file finds it held (or released for good), never blank.
        os.rename(staging, final)
    except OSError as error:
        log.warning("cannot lock lease lock %s (%s); using pid liveness only", staging, error)
        os.close(fd)
        staging.unlink(missing_ok=True)
        return None
    return _LockFile(fd, str(final))


@cache
def _own_start(pid: int) -> float:
    # Keyed by pid: a forked child asks again for its own.
    return process_start_time(pid) or 0.0


def new_owner() -> Owner:
    """An owner for one dispatch by this process, provably live until `release`.

    Blocking (it creates and locks a file): from a coroutine use `new_owner_async`.
    """
    owner, lock = _make_owner()
    with _held_lock:
        _held[owner.token] = lock
    return owner


def _make_owner() -> tuple[Owner, _LockFile | None]:
    """An owner and its lock file, not yet counted as held."""
    token = uuid.uuid4().hex
    # Read each time, not cached: a forked worker must not inherit its parent's identity.
    pid = os.getpid()
    lock = _hold(token)
    owner = Owner(
        host=_host(),
        pid=pid,
        started=_own_start(pid),
        token=token,
        lock=lock.path if lock is not None else None,
        since=ticks_now(),
        node=processes.node_id(pid),
    )
    return owner, lock


def _forget(owner: Owner) -> _LockFile | None:
    """Drop ``owner`` from this process's held dispatches (memory only, never blocks);
    the lock file that still stands for it, if any."""
    with _held_lock:
        return _held.pop(owner.token, None)


def _close(lock: _LockFile) -> None:
    # Unlink first, then unlock: a resumer then finds it missing or free, never held.
    with contextlib.suppress(OSError):
        os.unlink(lock.path)
    with contextlib.suppress(OSError):
        os.close(lock.fd)


def release(owner: Owner | None) -> None:
    """The dispatch this owner stood for is over (whatever its outcome): its lock file
    is removed.

    Blocking (it removes a file): from a coroutine use `release_soon`.
    """
    if owner is None:
        return
    lock = _forget(owner)
    if lock is not None:
        _close(lock)


def release_soon(owner: Owner | None) -> None:
    """`release` for event-loop code: never blocks, never awaits (safe in a
    ``finally`` of a cancelled task). The process stops holding the dispatch at once
    (`holds` is ``False``); its lock file is removed on a worker thread a moment
    later, so until then a resumer in another process sees it running and waits,
    which errs on the safe side. A process that exits first drops the lock with its
    death.
    """
    if owner is None:
        return
    lock = _forget(owner)
    if lock is None:
        return
    _lease_thread().submit(_close, lock)


def _lease_thread() -> ThreadPoolExecutor:
    global _worker
    with _held_lock:
        if _worker is None:
            _worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="langgraph-effects-lease")
        return _worker


def _make_ready() -> None:
    """Make owners ahead until `_READY` are ready (on the lease thread)."""
    global _making
    try:
        while True:
            with _held_lock:
                if len(_ready) >= _READY:
                    return
            _runtime_path()  # settles tempfile.tempdir first: part of the settings
            where = _runtime_settings()
            owner, lock = _make_owner()
            with _held_lock:
                _ready.append((owner, lock, where))
    finally:
        with _held_lock:
            _making = False


def ready_owner() -> Owner | None:
    """An owner made ahead, held from now on as `new_owner`'s are, or ``None``; once
    half are taken, more are made on the lease thread. Never blocks.

    Opening a call takes one instead of waiting for a thread to make it
    (``docs/performance.md``).
    """
    global _making
    where = _runtime_settings()
    with _held_lock:
        stale = [lock for _, lock, made_for in _ready if made_for != where and lock is not None]
        _ready[:] = [ready for ready in _ready if ready[2] == where]
        taken = _ready.pop() if _ready else None
        if taken is not None:
            _held[taken[0].token] = taken[1]
        start = not _making and len(_ready) < _READY // 2
        _making = _making or start
    for lock in stale:  # made for a runtime directory the settings no longer name
        _lease_thread().submit(_close, lock)
    if start:
        _lease_thread().submit(_make_ready)
    if taken is None:
        return None
    return replace(taken[0], since=ticks_now())  # its dispatch begins now


async def new_owner_async() -> Owner:
    """`new_owner` off the event loop (it creates and locks a file), or an owner made
    ahead (`ready_owner`) when there is one.

    Cancelled while the file is being made, the owner is released as soon as it
    exists, so no dispatch of this process is left looking alive for ever.
    """
    ready = ready_owner()
    if ready is not None:
        return ready
    made = asyncio.get_running_loop().run_in_executor(None, new_owner)
    try:
        return await asyncio.shield(made)
    except asyncio.CancelledError:
        made.add_done_callback(
            lambda f: None if f.cancelled() or f.exception() else release_soon(f.result())
        )
        raise


def holds(owner: Owner) -> bool:
    """Whether this process still holds ``owner``'s dispatch (not yet released)."""
    with _held_lock:
        return owner.token in _held


async def owner_alive_async(owner: Owner) -> bool | None:
    """`owner_alive` off the event loop (it opens and locks a file)."""
    return await asyncio.to_thread(owner_alive, owner)


def _probe(path: str, token: str | None = None) -> bool | None:
    """The lock file's verdict on the dispatch ``token``: ``True`` running, ``False``
    over, ``None`` unknown. Without a token: whether anyone holds the file at all.
    A missing file reads as over here: `owner_alive` looks further."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # released, or removed by a resumer that found it free
    except OSError:
        return None  # e.g. another user's directory: fall back to the pid
    return _judge(fd, token, path)


def _judge(fd: int, token: str | None, path: str | None) -> bool | None:
    """`_probe`'s verdict on the lock file open as ``fd`` (closed here); found
    free, it is unlinked at ``path`` (unless ``None``)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            os.close(fd)
            return None
        # Held: by the dispatch asked about only if the file is stamped with it (a
        # process of an earlier version kept one file for many dispatches, stamped
        # with each in turn, and ``idle`` between them).
        try:
            stamp = os.pread(fd, _STAMP_SIZE, 0).rstrip()
        except OSError:
            return True  # held, and unreadable: wait, the safe side
        finally:
            os.close(fd)
        # A blank file stands for one dispatch only (made before files were stamped).
        return token is None or not stamp or stamp == token.encode()
    # Free: its owner died without releasing it. Tidy up; nobody locks it again.
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)
    os.close(fd)
    return False


def _lock_verdict(owner: Owner) -> bool | None:
    """The owner's lock file on its dispatch: ``True`` running, ``False`` over,
    ``None`` if it cannot tell (no lock file, or unreadable, or missing and the
    owner's open files not ours to look at)."""
    if not owner.lock:
        return None
    try:
        fd = os.open(owner.lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        # Removed from its directory: by its owner at release, by a tmp cleaner or
        # logind at logout while the owner still holds it, or never visible here
        # (another mount namespace). A live owner that holds it has it open.
        if processes.live_start_time(owner.pid) != owner.started:
            return None  # its process is gone (or a zombie): the pid decides
        link = processes.open_file_of(owner.pid, owner.lock)
        if link is None:
            return None  # its open files are not ours to look at: the clock decides
        if link is False:
            return False  # not among its open files: closed at release
        try:
            fd = os.open(link, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        return _judge(fd, owner.token, None)
    except OSError:
        return None  # e.g. another user's directory: fall back to the pid
    return _judge(fd, owner.token, owner.lock)


def _pid_verdict(owner: Owner) -> bool | None:
    """``False`` if the owner's process is gone (or exited and not reaped yet: a
    zombie); ``None`` if it lives (that proves nothing about its dispatch) or we
    cannot tell."""
    start = process_start_time(owner.pid)
    if start is None:
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return None
        return None
    if start != owner.started:
        return False
    return None if processes.live_start_time(owner.pid) == owner.started else False


def _children_running(owner: Owner) -> bool:
    """The owner's process released the dispatch or is gone: whether the dispatch
    still runs in a process the owner started during it (a tool's ``gh`` or
    ``kubectl`` outlives a SIGKILLed worker and still sends)."""
    if processes.live_start_time(owner.pid) == owner.started:
        return False  # alive and released it: its tool returned or was cancelled
    # Gone, or killed and not reaped yet (a zombie): its files are closed, so its lock
    # reads released, but its children may still send.
    since = owner.since if owner.since is not None else owner.started
    child = processes.live_descendant(owner.pid, owner.started, since) or _forked_child(owner, since)
    if child is None:
        return False
    if len(_told) > 1024:
        _told.clear()
    if (owner.token, child) not in _told:
        _told.add((owner.token, child))
        log.info(
            "dispatch %s of pid %s is over in its process, but process %s it started "
            "during the dispatch still runs: waiting for it",
            owner.token,
            owner.pid,
            child,
        )
    return True


_told: set[tuple[str, int]] = set()  # (token, child) already logged
_foreign: set[str] = set()  # nodes already warned about


def _same_node(owner: Owner) -> bool:
    """Whether the owner's pid can be judged here: it runs under this kernel and in
    this pid namespace (or its row predates recording them)."""
    if owner.node is None or owner.node == processes.node_id(os.getpid()):
        return True
    if owner.node not in _foreign:
        _foreign.add(owner.node)
        log.warning(
            "a dispatch owner on host %r runs in another container or boot (%s, here %s): "
            "its pid cannot be checked from here, so its lease expires by time only. "
            "Give each container its own LANGGRAPH_EFFECTS_HOST.",
            owner.host,
            owner.node,
            processes.node_id(os.getpid()),
        )
    return False


def owner_alive(owner: Owner) -> bool | None:
    """``False`` if the dispatch is provably over, ``True`` if provably still running,
    ``None`` if we cannot tell (another host, or another container or boot under the
    same host name): then only the lease's expiry counts.

    Running means: its lock file is held and stamped with it, or its process is
    gone but a process it started since the dispatch began still lives. A lock file
    removed from its directory is looked for among the owner's open files; without
    one (another user's, no runtime directory) a dead process still proves the
    dispatch over, but a live one proves nothing: ``None``, and the clock decides.
    """
    if owner.host != _host() or not _same_node(owner):
        return None
    if owner.pid == os.getpid() and owner.started == _own_start(owner.pid):
        # Our own dispatch: this process's record decides, not the lock file, whose
        # removal (release_soon) may still be on its way.
        return holds(owner)
    running = _lock_verdict(owner)
    if running is None:
        running = _pid_verdict(owner)
    if running is False and _children_running(owner):
        return True
    return running


def lease_expired(op: Operation, *, now: float | None = None) -> bool:
    """Whether a ``dispatched`` operation's sender is gone: `protocol.holder_gone`
    given this host's verdict on its owner (`owner_alive`) and the clock."""
    alive = owner_alive(op.owner) if op.state is State.DISPATCHED and op.owner is not None else None
    return protocol.holder_gone(op, alive=alive, now=time.time() if now is None else now)


@cache
def _ticks_per_second() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


def ticks_now() -> float:
    """Now, in the unit and clock of `processes.process_start_time` (ticks since
    boot): when a dispatch begins (``Owner.since``)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) * _ticks_per_second()
