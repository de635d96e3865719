"""The sync row: ``EffectToolNode`` in a graph run with ``graph.invoke`` (issue 31).

A large share of LangGraph applications are synchronous: ``graph.invoke`` with a sync
saver, from a web view, a task queue or a script. This row runs the lab's graph as
they do: a sync ``send_notification`` tool under [`EffectToolNode`][langgraph_effects.EffectToolNode]
(the contract each provider offers, as the async row declares it), checkpoints and
the ledger in one file through [`EffectSqliteSaver`][langgraph_effects.EffectSqliteSaver], and a
worker process that drives it without an event loop of its own:

* a run is ``graph.invoke(payload, config)``; a resume ``graph.invoke(None, config)``;
  an operator's answer ``graph.invoke(Command(resume=...), config)``;
* the rival of ``two-runners`` resumes through
  [`recover_sync`][langgraph_effects.recover_sync]; the ``edit-branch`` column sends the
  edited message with ``invoke`` at the thread's first checkpoint.

Crash points are the same as the async row's: ``A``/``C`` are the dispatcher's fault
points, ``B`` and the lost response the lab client's, all reached from the sync tool's
thread or from the package's portal loop (the sync path's ledger work), and a kill
there is the same SIGKILL of the whole worker. Columns that cannot apply to a sync graph
are not run (``n/a`` in the table): ``tool-interrupt`` is about an interrupt surfacing
while sibling sends are still in flight, and a sync tools node surfaces it only once
every call of the AIMessage returned; ``reordered-entrypoint`` is the Functional API's
own rows' column.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt.tool_node import ToolCallRequest

from .._integrations.node import EffectToolNode
from .._runtime.context import current_operation
from .._runtime.lease import DEFAULT_LEASE_SECONDS
from ..checkpoint.sync import EffectSqliteSaver
from ..core.contract import Effect
from ..recovery.sync import recover_sync
from .faults import CRASH_POINTS, Faults, process_cpu
from .ours import ToolOutput, answer_from_provider, audit_ledger, check_cell, effect_for, install_fault_points
from .providers import KEYED_MODES, ProviderMode
from .strategies import (
    TOOL_NAME,
    BuildContext,
    Strategy,
    register,
)
from .worker import (
    RECOVER,
    RESUMING,
    Attempt,
    AttemptReport,
    WorkerSpec,
    attempt_config,
    attempt_input,
    attempt_report,
    attempts,
    cell_graph,
    edit_branch,
    raise_if_failed,
    recover_options,
    send_failure,
    worker_context,
)

NAME = "EffectToolNode (sync invoke)"
#: The columns a sync graph runs (every other one is ``n/a`` for this row).
COLUMNS = (
    "none",
    "A",
    "B",
    "C",
    "timeout",
    "duplicate",
    "policy",
    "lookup-timeout",
    "repeated-ids",
    "two-runners",
    "paused-owner",
    "wedging-answer",
    "definite-retry",
    "edit-branch",
    "child-process",
)
#: A key the provider dedups on, a lookup that settles it, and nothing at all (every
#: ambiguity to an operator): the three ways a sync app's provider answers.
PROVIDERS: tuple[ProviderMode, ...] = ("dedup", "lookup", "blind")


# -- the worker side ---------------------------------------------------------------


def send_tool_sync(ctx: BuildContext) -> BaseTool:
    """The lab's ``send_notification`` as a sync app writes it: a plain function."""
    client = ctx.client
    keyed = ctx.provider_mode in KEYED_MODES

    @tool(TOOL_NAME)
    def send_notification(operation: str, body: str) -> str:
        """Send one notification."""
        key = current_operation().provider_key if keyed else None
        receipt = client.send({"operation": operation, "body": body}, key=key)
        return f"sent {receipt.effect_id}"

    return send_notification


def build_sync_node(ctx: BuildContext) -> EffectToolNode:
    """``EffectToolNode`` over the sync tool, its ledger the sync saver's."""
    faults = ctx.faults
    install_fault_points(faults)

    def line_up(request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolOutput]) -> ToolOutput:
        # Two workers delivered the same resume meet before either decided anything.
        faults.meet()
        return execute(request)

    effect = effect_for(ctx)
    effects: dict[str, Effect] = {TOOL_NAME: effect} if effect is not None else {}
    point = CRASH_POINTS.get(ctx.crash_point)
    lease = point.lease_seconds if point is not None else None
    rate_limited = point is not None and point.rate_limited  # see ours.build_effect_node
    return EffectToolNode(
        [send_tool_sync(ctx)],
        effects=effects,
        handle_tool_errors=ctx.handled_errors,
        wrap_tool_call=None if rate_limited else line_up,
        lease_seconds=lease if lease is not None else DEFAULT_LEASE_SECONDS,
    )


def serve_sync(conn: Connection, spec: WorkerSpec) -> None:
    """The sync row's worker: no event loop of its own, the graph run with ``invoke``."""
    faults = Faults(conn)
    provider = spec.provider_settings.open(spec.files, spec.provider_mode)
    with EffectSqliteSaver.from_conn_string(str(spec.files.checkpoints)) as saver:
        saver.setup()
        ctx = worker_context(spec, faults, provider, saver)
        try:
            graph = cell_graph(spec.build(ctx), saver, spec.crash_point)
        except Exception:
            send_failure(conn)
            return
        for attempt in attempts(conn, faults):
            try:
                report = run_sync(graph, attempt, faults)
            except Exception:
                send_failure(conn)
            else:
                conn.send(("done", report, process_cpu()))
    provider.close()


def run_sync(graph: Any, attempt: Attempt, faults: Faults) -> AttemptReport:
    """One attempt through ``graph.invoke`` (the async worker's ``_run``, sync)."""
    config = attempt_config(attempt)
    refused: BaseException | None = None
    if attempt.kind != "inspect":
        try:
            _invoke(graph, attempt, config, faults)
        except Exception as error:
            if not attempt.tolerate:
                raise
            refused = error
    return attempt_report(graph.get_state(config), refused)


def _invoke(graph: Any, attempt: Attempt, config: Any, faults: Faults) -> None:
    if attempt.kind == "edit":
        payload, branch = edit_branch(attempt, config, list(graph.get_state_history(config)))
        graph.invoke(payload, branch, durability="sync")
        return
    snapshot = graph.get_state(config) if attempt.kind in RESUMING else None
    payload = attempt_input(attempt, snapshot)
    faults.start()
    if payload is RECOVER:
        raise_if_failed(recover_sync(graph, **recover_options(attempt)))
        return
    graph.invoke(payload, config, durability="sync")


# -- the parent side ---------------------------------------------------------------

STRATEGY = register(
    Strategy(
        NAME,
        build_sync_node,
        providers=PROVIDERS,
        ours=True,
        crash_points=COLUMNS,
        answer_review=answer_from_provider,
        audit=audit_ledger,
        check=check_cell,
        summary="EffectToolNode with a sync tool, the graph run by graph.invoke on "
        "EffectSqliteSaver (dedup, lookup, blind)",
        effect_saver=True,
        sync=True,
    )
)
