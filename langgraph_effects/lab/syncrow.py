"""The sync row: ``EffectToolNode`` in a graph run with ``graph.invoke`` (issue 31).

A large share of LangGraph applications are synchronous: ``graph.invoke`` with a sync
saver, from a web view, a task queue or a script. This row runs the lab's graph as
they do: a sync ``send_notification`` tool under :class:`~langgraph_effects.EffectToolNode`
(the contract each provider offers, as the async row declares it), checkpoints and
the ledger in one file through :class:`~langgraph_effects.SyncEffectSqliteSaver`, and a
worker process that drives it without an event loop of its own:

* a run is ``graph.invoke(payload, config)``; a resume ``graph.invoke(None, config)``;
  an operator's answer ``graph.invoke(Command(resume=...), config)``;
* the rival of ``two-runners`` resumes through
  :func:`~langgraph_effects.recover_sync`; the ``edit-branch`` column sends the
  edited message with ``invoke`` at the thread's first checkpoint.

Crash points are the same as the async row's: ``A``/``C`` are the engine's fault
points, ``B`` and the lost response the lab client's, all reached from the sync tool's
thread or from the package's portal loop (the sync path's ledger work), and a kill
there is the same SIGKILL of the whole worker. Columns that cannot apply to a sync graph
are not run (``n/a`` in the table): ``tool-interrupt`` is about an interrupt surfacing
while sibling sends are still in flight, and a sync tools node surfaces it only once
every call of the AIMessage returned; ``reordered-entrypoint`` is the Functional API's
own rows' column.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from .._integrations.node import EffectToolNode
from .._runtime import faults as _faults
from .._runtime.context import current_operation
from .._runtime.lease import DEFAULT_LEASE_SECONDS
from ..checkpoint.sync import SyncEffectSqliteSaver
from ..core.contract import Effect
from ..core.operation import Operation
from ..recovery.sync import recover_sync
from .faults import CRASH_POINTS, Faults, LabClient, process_cpu
from .ours import ToolOutput, answer_from_provider, audit_ledger, check_cell, effect_for
from .providers import KEYED_MODES, ProviderMode
from .strategies import (
    RATE_LIMIT_RETRY,
    TOOL_NAME,
    BuildContext,
    Strategy,
    lab_graph,
    register,
)
from .worker import (
    Attempt,
    AttemptReport,
    WorkerSpec,
    attempt_config,
    attempt_report,
    edit_branch,
    raise_if_failed,
    start_payload,
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

    def at_point(point: str) -> _faults.Hook:
        def hook(name: str, op: Operation) -> None:
            faults.reach(point)

        return hook

    _faults.install("after_intent", at_point("A"))
    _faults.install("before_outcome", at_point("C"))

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
    point = CRASH_POINTS.get(spec.crash_point)
    children = spec.files.children if point is not None and point.child else None
    with SyncEffectSqliteSaver.from_conn_string(str(spec.files.checkpoints)) as saver:
        saver.setup()
        ctx = BuildContext(
            strategy=spec.strategy,
            provider_mode=spec.provider_mode,
            crash_point=spec.crash_point,
            client=LabClient(provider, faults, child_markers=children),
            faults=faults,
            files=spec.files,
            checkpointer=saver,
            generation=spec.generation,
        )
        try:
            graph = lab_graph(
                spec.build(ctx),
                saver,
                point.scenario if point is not None else "single",
                retry=RATE_LIMIT_RETRY if point is not None and point.rate_limited else None,
            )
        except Exception:
            conn.send(("failed", traceback.format_exc()))
            return
        while True:
            attempt = conn.recv()
            if attempt is None:
                break
            faults.arm(attempt.faults)
            try:
                report = run_sync(graph, attempt, faults)
            except Exception:
                conn.send(("failed", traceback.format_exc()))
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
    payload: Any
    if attempt.kind == "edit":
        payload, branch = edit_branch(attempt, config, list(graph.get_state_history(config)))
        graph.invoke(payload, branch, durability="sync")
        return
    if attempt.kind == "start":
        payload = start_payload(attempt)
    elif attempt.kind in ("resume", "recover"):
        payload = None
        snapshot = graph.get_state(config)
        if not snapshot.values and not snapshot.next:
            # Killed before the thread's first checkpoint: the caller asks again.
            payload = start_payload(replace(attempt, turn=1))
        elif attempt.kind == "recover":
            faults.start()
            report = recover_sync(
                graph,
                thread_ids=[attempt.thread_id],
                min_idle=0,
                config={"configurable": {"policy_version": attempt.policy_version}},
            )
            raise_if_failed(report)
            return
    else:
        payload = Command(resume=attempt.resume)
    faults.start()
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
        "SyncEffectSqliteSaver (dedup, lookup, blind)",
        effect_saver=True,
        sync=True,
    )
)
