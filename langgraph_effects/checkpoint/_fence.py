"""One runner per thread: the rule both checkpointer extensions enforce.

LangGraph lets two runners resume one thread from the same checkpoint: both save a
child of it and the thread forks. With an LLM the branches differ (another
follow-up, other arguments), so they make different operations and the ledger,
which dedups per operation, cannot see the duplicate. The savers refuse instead:

* a checkpoint gets **at most one child** per thread and namespace from runs that
  resumed it as the thread's head. Saving a second one raises
  `ThreadConflictError`, and nothing of it is
  stored. The check and the insert are one transaction, atomic across processes
  (SQLite ``BEGIN IMMEDIATE``; Postgres a transaction-scoped advisory lock per
  thread and namespace, taken by a trigger inside LangGraph's own insert);
* except where the caller branches on purpose (`branching`): a run that
  *named* the checkpoint it starts from (``checkpoint_id`` in its config, or a
  subgraph loaded through LangGraph's time-travel lookup) while that checkpoint
  already had a child, and every save that is not a run's (``update_state``, any
  ``as_node``). A run that names the head itself (no child yet) is fenced as a
  runner: two of them cannot both proceed;
* pending writes for a checkpoint that another runner already moved past (it has
  a child this saver did not write) are refused the same way: the loser's late task
  results never land on the shared checkpoint.

Under ``durability="async"`` LangGraph starts the next step before the refused save
has failed, and the refusal surfaces only when the run ends. The loser's tool node
waits for the checkpoint holding its calls before it dispatches; that checkpoint is
never saved, so nothing is sent. To make that wait end at once with the clear error
(not a timeout), a run remembers its refusal (`RunMark`, shared through the
run's context with every task it starts) and a tool's wait re-raises it. The same
mark holds the run's branch points.

Only the parent's children are looked at (an index on ``(thread_id,
checkpoint_ns, parent_checkpoint_id)`` makes that one probe), never checkpoint
ids' order, so clocks that differ between hosts do not matter.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple

from .. import _private
from .._runtime.lifecycle import check_thread_deletable, forget_thread
from ..core.text import require_config_text, require_metadata_text
from ..errors import NotSetUpError, SchemaBehindError, SchemaTooNewError, ThreadConflictError
from ..ledger.base import DEFAULT_ACTOR, Ledger

#: The index that makes "does this checkpoint have a child?" one probe.
INDEX_NAME = "effect_checkpoints_by_parent"
INDEX_SQL = (
    f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} "
    "ON checkpoints (thread_id, checkpoint_ns, parent_checkpoint_id)"
)

_REMEMBERED = 4096  # checkpoints this saver wrote: its own late writes, turns without a read


def coordinates(config: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """(thread id, namespace, checkpoint id) a saver call addresses."""
    conf = config["configurable"]
    parent = conf.get("checkpoint_id")
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), (str(parent) if parent else None)


def children_sql(parent: str | None, placeholder: str) -> str:
    """Children of ``parent`` (or roots when ``None``) other than the checkpoint being saved."""
    p = placeholder
    where_parent = "parent_checkpoint_id IS NULL" if parent is None else f"parent_checkpoint_id = {p}"
    return (
        f"SELECT checkpoint_id FROM checkpoints WHERE thread_id = {p} AND checkpoint_ns = {p} "
        f"AND {where_parent} AND checkpoint_id <> {p} LIMIT 2"
    )


def children_params(thread_id: str, ns: str, parent: str | None, own: str) -> tuple[str, ...]:
    if parent is None:
        return (thread_id, ns, own)
    return (thread_id, ns, parent, own)


class Written:
    """The checkpoints this saver committed lately (bounded): its own runs' children,
    each with the parent it was saved under and its header (id, parent, channel
    versions and the metadata's ``source`` and ``step``, never its values), so a tool
    task can learn the turn of the checkpoint it was prepared from without reading it
    back (``saved_header``).

    An entry is a flat tuple of strings (the versions as JSON text), which the
    garbage collector stops tracking at its first pass. Entries of nested dicts
    lived long enough to reach the oldest generation: a full cache held ~28,000
    tracked objects, and their steady stream made CPython's full collections of the
    whole process more frequent and slower (benchmarks/gc_churn.py). The header's
    dicts are built when asked for.
    """

    def __init__(self) -> None:
        self._ids: OrderedDict[str, _Entry] = OrderedDict()
        self._parents: dict[str | None, int] = {}

    def add(self, saved: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            config: RunnableConfig) -> None:
        """Remember a committed save: ``saved`` is what ``aput`` returns, ``config`` what
        it was given (naming the parent)."""
        thread_id, ns, checkpoint_id = coordinates(saved)
        parent = coordinates(config)[2]
        kept = {k: metadata[k] for k in _KEPT_METADATA if k in metadata}  # type: ignore[literal-required]
        channels = checkpoint.get("channel_versions") or {}
        seen = checkpoint.get("versions_seen") or {}
        key = str(checkpoint_id)
        if key in self._ids:
            self._forget(key)
        # Where JSON would not give the versions back as they are (a custom saver's),
        # no header is kept: a tool task reads the checkpoint back instead.
        exact = _exact(channels) and _exact(kept) and _exact_nested(seen)
        blob = _HEADER_JSON.encode([channels, seen, kept]) if exact else None
        self._ids[key] = (thread_id, ns, parent, str(checkpoint["id"]), blob)
        self._parents[parent] = self._parents.get(parent, 0) + 1
        while len(self._ids) > _REMEMBERED:
            self._forget(next(iter(self._ids)))

    def _forget(self, checkpoint_id: str) -> None:
        parent = self._ids.pop(checkpoint_id)[2]
        left = self._parents[parent] - 1
        if left:
            self._parents[parent] = left
        else:
            del self._parents[parent]

    def __contains__(self, checkpoint_id: object) -> bool:
        return checkpoint_id in self._ids

    def forget_thread(self, thread_id: str) -> None:
        """Forget every save of ``thread_id`` (the thread was deleted)."""
        for key in [key for key, entry in self._ids.items() if entry[0] == thread_id]:
            self._forget(key)

    def has_child(self, parent: str) -> bool:
        """Whether this saver saved a child of ``parent`` (its own run moved past it)."""
        return parent in self._parents

    def header(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple | None:
        """The header of a checkpoint this saver committed, if it still remembers it."""
        found = self._ids.get(checkpoint_id)
        if found is None or found[:2] != (thread_id, ns):
            return None
        _, _, parent, own_id, blob = found
        if blob is None:
            return None
        versions, seen, kept = json.loads(blob)
        header: Any = {"id": own_id, "channel_versions": versions, "versions_seen": seen}

        def config(at: str) -> Any:
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": at}}

        parent_config = config(parent) if parent else None
        return CheckpointTuple(config(checkpoint_id), header, kept, parent_config)


#: One remembered save: thread, namespace, parent id, own id, and as JSON text its
#: channel versions, versions seen and kept metadata (``None``: not kept; see
#: `Written`).
_Entry = tuple[str, str, "str | None", str, "str | None"]
_HEADER_JSON = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))
#: The metadata keys a header keeps (what reading a checkpoint's turn looks at).
_KEPT_METADATA = ("source", "step")


def _exact_nested(values: Mapping[Any, Any]) -> bool:
    """`_exact` for a mapping of str to mappings (``versions_seen``)."""
    for key, inner in values.items():  # noqa: SIM110 (called on every save: no generator)
        if type(key) is not str or not _exact(inner):
            return False
    return True


def _exact(values: Mapping[Any, Any]) -> bool:
    """Whether JSON gives ``values`` back equal and of the same types (str keys, and
    str, int, float or None values: what LangGraph's savers use for versions)."""
    for key, value in values.items():
        if type(key) is not str or (value is not None and type(value) not in _SCALARS):
            return False
    return True


_SCALARS = (str, int, float)


def refuse_checkpoint(thread_id: str, ns: str, parent: str | None, children: list[str]) -> None:
    """Raise if a new child of ``parent`` would fork the thread."""
    if children:
        raise ThreadConflictError(thread_id, ns, parent, children[0])


#: The channel LangGraph stores a failed task's exception under (a key of WRITES_IDX_MAP).
ERROR_CHANNEL = "__error__"


def own_refusal(writes: Any) -> bool:
    """The writes only record that this run was refused (a task failed with our error).

    LangGraph stores a failed task's exception on the checkpoint the task ran from;
    for a refused run that would be the one piece of it landing on the shared
    checkpoint, so the savers drop it.
    """
    items = list(writes)
    return bool(items) and all(
        channel == ERROR_CHANNEL and isinstance(value, ThreadConflictError) for channel, value in items
    )


def refuse_writes(
    thread_id: str, ns: str, checkpoint_id: str | None, children: list[str], written: Written
) -> None:
    """Raise if ``checkpoint_id`` was moved past by another runner (a child not ours)."""
    if children and not any(c in written for c in children):
        raise ThreadConflictError(thread_id, ns, checkpoint_id, children[0], what="task results")


#: (thread id, namespace, checkpoint id or ``None`` for the namespace's start).
Coordinates = tuple[str, str, "str | None"]


@dataclass
class RunMark:
    """One graph run, as seen by the saver: whether one of its saves was refused, and
    the checkpoints it branches from on purpose."""

    run: Any = None
    """The run's own object (`run_of`)."""
    refused: ThreadConflictError | None = None
    branch_points: set[Coordinates] = field(default_factory=set)
    """Checkpoints the run named (by ``checkpoint_id``, or a subgraph's time-travel
    lookup) that already had a child when it loaded them: its saves on them branch."""


_RUN: ContextVar[RunMark | None] = ContextVar("langgraph_effects_run_mark", default=None)


def on_load(config: Mapping[str, Any]) -> None:
    """A top-level run loads its checkpoint: start a fresh mark for it (and its
    subgraphs), unless this run already has one (LangGraph loads twice when a run
    names a checkpoint: it also looks for a later one)."""
    if not _private.from_graph_loop(config) or _private.checkpoint_ns(config):
        return
    run = _private.run_of(config)
    mark = _RUN.get()
    if mark is None or run is None or mark.run is not run:
        _RUN.set(RunMark(run=run))


def names_checkpoint(config: Mapping[str, Any]) -> bool:
    """The run's loop loads a checkpoint it named (a ``checkpoint_id``), not the head."""
    return _private.from_graph_loop(config) and bool(config["configurable"].get("checkpoint_id"))


def branch_from(at: Coordinates) -> None:
    """The current run named ``at`` and it already has a child: saving on it branches."""
    mark = _RUN.get()
    if mark is not None:
        mark.branch_points.add(at)


def branching(config: Mapping[str, Any]) -> bool:
    """Whether a save (a checkpoint under ``config``'s checkpoint, or writes on it)
    branches on purpose, so that a second child is not a second runner: it is not a
    run's (``update_state``), or the run named that checkpoint as a branch point."""
    if not _private.from_graph_loop(config):
        return True
    mark = _RUN.get()
    return mark is not None and coordinates(config) in mark.branch_points


def on_refused(error: ThreadConflictError) -> None:
    """Remember in the current run that a save was refused.

    Call it from the run's coroutine, not from a database worker thread: a context
    variable read there is not the run's.
    """
    mark = _RUN.get()
    if mark is not None and mark.refused is None:
        mark.refused = error


def check_run(config: Mapping[str, Any]) -> None:
    """A checkpoint asked for by id was not found: inside a run whose save was refused,
    it never will be (a tool waiting for it ends here, with the refusal)."""
    mark = _RUN.get()
    if mark is None or mark.refused is None or _private.from_graph_loop(config):
        return
    e = mark.refused
    raise ThreadConflictError(e.thread_id, e.checkpoint_ns, e.parent_id, e.child_id)


@dataclass(frozen=True)
class Put:
    """One ``aput`` call, handed to a saver's fenced hook."""

    config: RunnableConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions
    check: bool
    """Whether a second child is refused (not when the save branches on purpose)."""


class FencedSaver:
    """The one-runner-per-thread flow of both savers, written once.

    Listed before LangGraph's saver among a saver's bases. The saver supplies
    ``_written`` and the two hooks that check and store inside one fenced
    transaction (its own SQL); the order of the checks lives here.
    """

    _written: Written
    ledger: Ledger
    _setup_seen: bool = False
    """Whether this saver has seen its database set up (its own setup(), or the check)."""
    opened_as: str | None = None
    """The class the user opened, where it is not this one (a sync saver wrapping this
    async one): what the errors name."""

    async def _ready_for_use(self) -> None:
        """Refuse, once per saver and before anything is read or saved, a database whose
        setup() never ran (`NotSetUpError`) or whose
        ledger is at another schema version: the same check on every backend, so a
        forgotten setup() fails alike on SQLite (where LangGraph's saver would create
        its tables itself, and migrate an older ledger unasked) and on Postgres."""
        if self._setup_seen:
            return
        missing = [] if await self._has_checkpoint_tables() else ["checkpoint tables"]
        found = await self.ledger.schema_version()
        needed = self.ledger.SCHEMA_VERSION
        if found is None:
            missing.append("langgraph-effects ledger")
        if missing:
            name = self.opened_as or type(self).__name__
            raise NotSetUpError(name, self.ledger.where, " and no ".join(missing), needed)
        assert found is not None
        if found > needed:
            raise SchemaTooNewError(found, needed, self.ledger.where)
        if found < needed:
            raise SchemaBehindError(found, needed, self.ledger.where)
        self._setup_seen = True

    async def _has_checkpoint_tables(self) -> bool:
        """Whether LangGraph's checkpoint tables exist (read only)."""
        raise NotImplementedError

    async def adelete_thread(
        self, thread_id: str, *, force: bool = False, actor: str = DEFAULT_ACTOR
    ) -> None:
        """Delete a thread: its checkpoints and writes (LangGraph's ``adelete_thread``,
        which LangGraph's server calls when a thread is deleted), then its operations
        with their audit rows and budget holds.

        While the thread has unresolved operations, nothing is deleted and
        [`UnresolvedOperationsError`][langgraph_effects.errors.UnresolvedOperationsError]
        names them: settle them first, or pass ``force=True`` (an operator's decision,
        logged with ``actor``; see docs/lifecycle.md).
        """
        await self._ready_for_use()
        await check_thread_deletable(self.ledger, str(thread_id), force=force, actor=actor)
        await super().adelete_thread(thread_id)  # type: ignore[misc]
        self._written.forget_thread(str(thread_id))
        await forget_thread(self.ledger, str(thread_id), force=force)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """LangGraph's ``aget_tuple``; a run's first load starts its mark, a checkpoint
        the run names is a branch point if it has a child, and a tool waiting for a
        checkpoint its refused run will never save gets the refusal. A config id that
        cannot be stored (a thread id with a lone surrogate) is refused
        (`UnencodableValueError`)."""
        require_config_text(config)
        await self._ready_for_use()
        on_load(config)
        found: CheckpointTuple | None = await super().aget_tuple(config)  # type: ignore[misc]
        if found is None and config["configurable"].get("checkpoint_id"):
            check_run(config)
        elif found is not None and names_checkpoint(config):
            await self._note_branch_point(coordinates(found.config))
        return found

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """LangGraph's ``alist``. A subgraph's loop under its parent's time travel loads
        through it (the last checkpoint before the replayed one): that checkpoint, or
        the namespace's start when there is none, is named by the caller."""
        if config is not None:
            require_config_text(config)
        await self._ready_for_use()
        listed = super().alist(config, filter=filter, before=before, limit=limit)  # type: ignore[misc]
        if config is None or before is None or not _private.replaying(config):
            async for item in listed:
                yield item
            return
        # Read to the end first: a saver may hold its lock while it lists.
        items = [item async for item in listed]
        thread_id, ns, _ = coordinates(config)
        await self._note_branch_point(coordinates(items[0].config) if items else (thread_id, ns, None))
        for item in items:
            yield item

    async def _note_branch_point(self, at: Coordinates) -> None:
        if await self._has_child(*at):
            branch_from(at)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint unless it would be a second child of its parent. Ids or
        metadata text that cannot be stored are refused before anything is written
        (`UnencodableValueError`), the same on every backend."""
        require_config_text(config)
        require_metadata_text(metadata)
        await self._ready_for_use()
        put = Put(config, checkpoint, metadata, new_versions, check=not branching(config))
        saved = await self._put_fenced(put)
        self._written.add(saved, checkpoint, metadata, config)  # committed: durable now
        return saved

    def saved_header(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple | None:
        """The header (id, parent, metadata, channel versions; no values) of a checkpoint
        this saver has committed, or ``None`` if it is not one it remembers: then read
        it (it may be another process's, or still being saved)."""
        return self._written.header(thread_id, ns, checkpoint_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, unless another runner already moved past their checkpoint."""
        require_config_text(config)
        if own_refusal(writes):
            return  # the refused run's error: nothing of it lands
        await self._ready_for_use()
        await self._put_writes_fenced(config, writes, task_id, task_path, not branching(config))

    async def _put_fenced(self, put: Put) -> RunnableConfig:
        """In one fenced transaction: if ``put.check``, refuse a second child of the
        parent (`refuse_checkpoint`); then store the checkpoint."""
        raise NotImplementedError

    async def _put_writes_fenced(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str,
        check: bool,
    ) -> None:
        """In one fenced transaction: if ``check``, `refuse_writes`; then store the writes."""
        raise NotImplementedError

    async def _has_child(self, thread_id: str, ns: str, parent: str | None) -> bool:
        """Whether ``parent`` (``None``: the namespace's start) has a child checkpoint."""
        raise NotImplementedError
