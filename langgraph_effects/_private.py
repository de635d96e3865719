"""The one adapter for private LangGraph, LangChain and driver pieces we rely on.

A node reaches the graph's checkpointer and durability mode only through
``__pregel_*`` keys of its config; ``EffectToolNode`` overrides and reads private
``ToolNode`` members; a ``Send`` to the tool node carries a private payload shape; the
savers and ledgers reach into aiosqlite and LangGraph's savers. Keeping every such
piece here means one file to fix when one moves, and ``tests/test_langgraph_contract.py``
fails loudly if one does (pinned range: see pyproject.toml). Names public in
LangGraph are used directly elsewhere.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    import aiosqlite
    from langgraph.prebuilt import ToolNode

_T = TypeVar("_T")

# -- the running task's config ------------------------------------------------------

CHECKPOINTER = "__pregel_checkpointer"
DURABILITY = "__pregel_durability"
TASK_ID = "__pregel_task_id"
SEND = "__pregel_send"
RUNTIME = "__pregel_runtime"
REPLAY_STATE = "__pregel_replay_state"
CALL = "__pregel_call"
PUSH = "__pregel_push"


def _configurable(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config.get("configurable") or {}


def checkpointer(config: Mapping[str, Any]) -> Any | None:
    """The graph's checkpointer as the running node sees it."""
    return _configurable(config).get(CHECKPOINTER)


def durability(config: Mapping[str, Any]) -> str | None:
    """``"sync"``, ``"async"`` or ``"exit"`` when the run was given one explicitly.

    ``None`` otherwise: LangGraph sets the key only for an explicit ``durability=``,
    and never in a Functional API task's config; the run's mode is then unknown to
    the node (LangGraph's default is ``"async"``).
    """
    value = _configurable(config).get(DURABILITY)
    return str(value) if value is not None else None


def task_id(config: Mapping[str, Any]) -> str | None:
    value = _configurable(config).get(TASK_ID)
    return str(value) if value is not None else None


def write_now(config: Mapping[str, Any], channel: str, value: Any) -> None:
    """Add a write to the running task's writes, ahead of the ones its return value
    makes (LangGraph's ``push_message`` writes the same way). The writes are saved
    with the task's, in the same commit; a retried task starts with none."""
    _configurable(config)[SEND]([(channel, value)])


#: The channel of the writes that hold a task's pending interrupts in a checkpoint
#: (``langgraph._internal._constants.INTERRUPT``). LangGraph keeps one such write per
#: task, replaced each time the task interrupts again: the question asked last.
INTERRUPT_CHANNEL = "__interrupt__"


def pending_interrupt_values(saved: Any, task: str) -> list[Any] | None:
    """The values of the interrupts ``task`` raised last, as the checkpoint tuple
    ``saved`` holds them (its pending writes), or ``None`` if it holds none for it."""
    for write in getattr(saved, "pending_writes", None) or ():
        if len(write) == 3 and write[0] == task and write[1] == INTERRUPT_CHANNEL:
            raised = write[2] if isinstance(write[2], list | tuple) else [write[2]]
            return [getattr(i, "value", None) for i in raised]
    return None


def from_graph_loop(config: Mapping[str, Any]) -> bool:
    """Whether a saver call comes from a graph run's loop (its config carries the
    loop's ``__pregel_*`` keys), not from ``update_state``, a read or a tool's wait."""
    for key in _configurable(config):  # noqa: SIM110 (called on every save: no generator)
        if str(key).startswith("__pregel_"):
            return True
    return False


def run_of(config: Mapping[str, Any]) -> Any | None:
    """The object that is one top-level run's own (its ``Runtime``): the same in every
    checkpoint load and save that run's loop makes, another one for the next run."""
    return _configurable(config).get(RUNTIME)


def replaying(config: Mapping[str, Any]) -> bool:
    """Whether a subgraph's loop runs under its parent's time travel (it loads its
    checkpoint through LangGraph's replay lookup, ``alist(before=...)``)."""
    return _configurable(config).get(REPLAY_STATE) is not None


def thread_id(config: Mapping[str, Any]) -> str | None:
    value = _configurable(config).get("thread_id")
    return str(value) if value is not None else None


def checkpoint_ns(config: Mapping[str, Any]) -> str:
    return str(_configurable(config).get("checkpoint_ns") or "")


def parent_namespace(ns: str) -> str:
    """``"agent:<t1>|tools:<t2>"`` -> ``"agent:<t1>"``: the namespace the task runs in."""
    return ns.rsplit("|", 1)[0] if "|" in ns else ""


def parent_checkpoint(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, checkpoint id) of the checkpoint this task was prepared from.

    That checkpoint holds the AIMessage whose calls the task runs (for a Functional
    API ``@task``: the entrypoint's input); it must be durable before anything is
    dispatched. The namespace is the one the checkpoint is *saved* under: a
    Functional API task is pushed from inside the entrypoint's task, so its map has
    an entry for that task's namespace that repeats the loop's checkpoint id; the
    checkpoint itself lives in the loop's namespace, the topmost ancestor that maps
    to the same id.
    """
    conf = _configurable(config)
    ns = parent_namespace(checkpoint_ns(config))
    mapping = conf.get("checkpoint_map") or {}
    checkpoint_id = mapping.get(ns)
    if checkpoint_id is None:
        return None
    while ns:
        up = parent_namespace(ns)
        if mapping.get(up) != checkpoint_id:
            break
        ns = up
    return ns, str(checkpoint_id)


def call_path(config: Mapping[str, Any]) -> str | None:
    """Where a Functional API ``@task`` call sits in its entrypoint, without task ids.

    ``metadata["langgraph_path"]`` is ``("__pregel_push", <parent path>, <call
    index>, ...)``: the n-th task call of its parent, so every run of the same
    entrypoint from the same checkpoint (resume, retry, time travel) reproduces it,
    while the task id (derived from the checkpoint id) changes under time travel.
    """
    path = (config.get("metadata") or {}).get("langgraph_path")
    if not isinstance(path, tuple | list) or not path:
        return None

    def render(p: Any) -> str:
        if isinstance(p, tuple | list) and len(p) >= 2 and p[0] == "__pregel_pull":
            return str(p[1])
        if isinstance(p, tuple | list) and len(p) >= 3 and p[0] == "__pregel_push":
            return f"{render(p[1])}/{p[2]}"
        return str(p)

    return render(path)


class SiblingCall(NamedTuple):
    """One task call its entrypoint made in this run (LangGraph's pushed ``PregelExecutableTask``).

    ``place`` is its index among its parent's calls; ``proc`` what LangGraph runs for
    it (see `task_function`); ``input`` what it was called with (``(args,
    kwargs)``); ``writes`` the task's live writes (LangGraph's saved ones when its
    result was handed back from the checkpoint): read them, do not keep them.
    """

    place: int
    task_id: str
    proc: Any
    input: Any
    writes: Any


class _QuietChannel(logging.Filter):
    """Drops LangGraph's warning about a write to a channel the graph does not have, for
    one channel: it warns on every such write (``pregel._algo.apply_writes``, logger
    ``"langgraph"``), and ignores the write as wanted."""

    def __init__(self, channel: str) -> None:
        super().__init__()
        self.needle = f"wrote to unknown channel {channel},"

    def filter(self, record: logging.LogRecord) -> bool:
        return self.needle not in record.getMessage()


def quiet_unknown_channel(channel: str) -> None:
    """Silence LangGraph's per-write warning for ``channel`` (idempotent)."""
    logger = logging.getLogger("langgraph")
    if not any(isinstance(f, _QuietChannel) and f.needle.startswith(f"wrote to unknown channel {channel},")
               for f in logger.filters):
        logger.addFilter(_QuietChannel(channel))


def task_function(proc: Any) -> Any:
    """The function a pushed task runs: LangGraph wraps it as ``RunnableSeq(RunnableCallable(
    func, afunc), ChannelWrite(RETURN))`` (``func`` is ``None`` for a coroutine function)."""
    steps = getattr(proc, "steps", None)
    first = steps[0] if steps else proc
    return getattr(first, "func", None) or getattr(first, "afunc", None)


def sibling_calls(config: Mapping[str, Any]) -> tuple[int, list[SiblingCall]] | None:
    """(the running task's index, every task call of its parent in this run), or ``None``.

    The loop that runs the step is reached through the running task's ``__pregel_call``
    (a ``functools.partial`` of the runner's ``_call``/``_acall`` whose
    ``schedule_task`` is the loop's bound ``accept_push``); its ``tasks`` holds every
    task pushed in this step, those LangGraph answered from the checkpoint's saved
    writes (without running them) included, with their input.
    """
    conf = _configurable(config)
    path = (config.get("metadata") or {}).get("langgraph_path")
    call = conf.get(CALL)
    schedule = getattr(call, "keywords", {}).get("schedule_task")
    loop = getattr(schedule, "__self__", None)
    tasks = getattr(loop, "tasks", None)
    if not isinstance(path, tuple | list) or len(path) < 3 or path[0] != PUSH or tasks is None:
        return None
    siblings: list[SiblingCall] = []
    for task in list(tasks.values()):
        tp = task.path
        if len(tp) < 3 or tp[0] != PUSH or tp[1] != path[1] or not isinstance(tp[2], int):
            continue
        siblings.append(SiblingCall(tp[2], str(task.id), task.proc, task.input, task.writes))
    return int(path[2]), sorted(siblings, key=lambda s: s.place)


def graph_tool_nodes(config: Mapping[str, Any]) -> list[Any]:
    """The ``ToolNode`` objects of the graph whose task is running (``create_agent``'s
    ``"tools"`` node), or ``[]`` when they cannot be reached.

    Reached like `sibling_calls`: the running task's ``__pregel_call`` is bound to
    the loop that runs the step, whose ``nodes`` map each node's name to a
    ``PregelNode`` whose ``bound`` is what the node runs. Middleware learns of the
    agent's tools no other way before a call of each reaches it.
    """
    call = _configurable(config).get(CALL)
    schedule = getattr(call, "keywords", {}).get("schedule_task")
    nodes = getattr(getattr(schedule, "__self__", None), "nodes", None)
    if not isinstance(nodes, Mapping):
        return []
    found = [getattr(node, "bound", None) for node in nodes.values()]
    return [bound for bound in found if isinstance(getattr(bound, "tools_by_name", None), dict)]


# -- ToolNode internals ---------------------------------------------------------------

#: The ``ToolNode`` methods ``EffectToolNode`` overrides, with their parameters: the
#: node-level pair (one session per node execution) and the per-call pair (below any
#: ``wrap_tool_call`` wrapper, whose ``execute`` goes through them).
TOOL_NODE_OVERRIDES: dict[str, tuple[str, ...]] = {
    "_func": ("self", "input", "config", "runtime"),
    "_afunc": ("self", "input", "config", "runtime"),
    "_execute_tool_sync": ("self", "request", "input_type", "config"),
    "_execute_tool_async": ("self", "request", "input_type", "config"),
}


def tool_calls_in(node: ToolNode, input: Any) -> list[Any]:
    """The tool calls a ``ToolNode`` will run for ``input`` (its own parsing, so a
    ``Send`` payload, a message list and a state dict are read exactly as it reads them)."""
    tool_calls, _ = node._parse_input(input)
    return list(tool_calls)


def messages_key(node: ToolNode) -> str:
    """The state key a ``ToolNode`` reads its messages from."""
    return str(node._messages_key)


def sync_only_wrapper(node: ToolNode) -> bool:
    """Whether the node was given a ``wrap_tool_call`` wrapper but no async one (it then
    runs the sync wrapper, and the tools under it, on the event loop's thread)."""
    return node._wrap_tool_call is not None and node._awrap_tool_call is None


# -- create_agent internals ------------------------------------------------------------


def agent_repairs(history: list[Any]) -> list[Any] | None:
    """The history ``create_agent``'s model node writes back in place of ``history``
    (``RemoveMessage(REMOVE_ALL_MESSAGES)``, this list, then the model's reply), or
    ``None`` when it writes just the reply: it answers invalid tool calls (malformed
    arguments) itself, in ``langchain.agents.factory._patch_invalid_tool_calls``."""
    from langchain.agents.factory import _patch_invalid_tool_calls

    repaired = _patch_invalid_tool_calls(history)
    return repaired if repaired != history else None


# -- Send payloads --------------------------------------------------------------------

#: A ``Send`` may carry one tool call to the tool node as ``{"__type":
#: "tool_call_with_context", "tool_call": ..., "state": ...}`` (LangGraph's private
#: ``ToolCallWithContext``; ``create_react_agent`` sends it): the history is in ``state``.
TOOL_CALL_WITH_CONTEXT = "tool_call_with_context"


# -- checkpoint savers and database drivers


async def run_in_connection_thread(
    conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], _T]
) -> _T:
    """Run ``fn(sqlite3_connection)`` on aiosqlite's worker thread, as one hop.

    aiosqlite's public API runs one statement per hop; a transaction of several
    statements would cost a hop each and let other coroutines interleave.
    ``Connection._execute`` (private, stable since aiosqlite 0.17) runs any function
    on that thread.
    """
    return await conn._execute(fn, conn._conn)  # type: ignore[no-any-return,no-untyped-call]


def sqlite_saver_is_setup(saver: Any) -> bool:
    """Whether an ``AsyncSqliteSaver`` already created its tables (its undocumented
    ``is_setup`` flag, set by its ``setup()``)."""
    return bool(saver.is_setup)


def postgres_connection(conn: Any) -> AbstractAsyncContextManager[Any]:
    """A connection out of an ``AsyncPostgresSaver``'s ``conn`` (a connection or a
    pool), as LangGraph's own ``_ainternal.get_connection`` hands it out."""
    from langgraph.checkpoint.postgres import _ainternal

    return _ainternal.get_connection(conn)


def postgres_saver_cursor(parent: Any, *, pipeline: bool) -> AbstractAsyncContextManager[Any]:
    """``AsyncPostgresSaver._cursor``: where its ``aput``/``aput_writes`` get the cursor
    their statements run on. ``AsyncEffectPostgresSaver`` overrides that method to run one
    statement of its own first, in their transaction; ``parent`` is its ``super()``."""
    return parent._cursor(pipeline=pipeline)  # type: ignore[no-any-return]


# The statements AsyncSqliteSaver.aput / aput_writes run (langgraph-checkpoint-sqlite
# 3.x); AsyncEffectSqliteSaver runs them again inside its own fenced transaction.
INSERT_CHECKPOINT_SQL = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
UPSERT_WRITES_SQL = (
    "INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_WRITES_SQL = (
    "INSERT OR IGNORE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
    "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
