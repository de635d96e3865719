"""``EffectMiddleware``: the same guarantees for ``langchain.agents.create_agent``.

``create_agent`` does not take a ToolNode; it takes middleware, and it runs one
task per tool call. ``EffectMiddleware`` wraps each call with the same
`Session` as ``EffectToolNode``: bind the call to
its durable operation, replay, execute under a lease, reconcile, and, when
evidence cannot settle it, raise one ``interrupt()`` for that task.

It also answers "dangling" tool calls (no ToolMessage, see ``dangling``) from the
ledger, inside the model call rather than in a ``before_model`` node: a node would
cost every turn a graph step and its checkpoint commits.

Put it **last** in ``middleware=[...]`` (innermost), so it sees every real
dispatch, including each attempt ``ToolRetryMiddleware`` makes: under it, a retry
of an ambiguous call goes through reconciliation instead of a blind re-send.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, cast

from ..errors import MissingExtraError

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain.agents.middleware.types import (
        ExtendedModelResponse,
        ModelCallResult,
        ModelRequest,
        ModelResponse,
    )
except ModuleNotFoundError as _missing:  # langchain comes with the "agents" extra
    if (_missing.name or "").partition(".")[0] != "langchain":
        raise
    raise MissingExtraError("EffectMiddleware", "langchain", "agents") from _missing
from langchain_core.messages import AIMessage, RemoveMessage, ToolMessage
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from .. import _private
from .._runtime import portal as _portal
from .._runtime.calls import Settings, check_ledger
from .._runtime.dangling import DanglingAnswer, find_answers, insert_answers
from .._runtime.lease import DEFAULT_LEASE_SECONDS
from .._runtime.messages import unanswered
from .._runtime.session import (
    Session,
    approved_request,
    args_problem,
    args_valid,
    effectful_calls,
    refusal,
    run_call_rounds,
    run_call_rounds_sync,
)
from ..checkpoint._sides import refuse_async_only_tool
from ..core.contract import Effect
from ..core.options import check_tool_names
from ..errors import NoLedgerError
from ..ledger.attach import ledger_of
from ..ledger.base import Ledger
from . import keys

ToolResult = ToolMessage | Command[Any]


def _asking(state: Any, call: Mapping[str, Any]) -> AIMessage | None:
    """The (latest) AIMessage that asked for ``call``; ``None`` if the state has none.

    Scanned from the end: it is nearly always the last message."""
    call_id = call.get("id")
    history = state.get("messages", []) if isinstance(state, Mapping) else []
    if not call_id:
        return None
    for message in reversed(history):
        if isinstance(message, AIMessage) and any(c.get("id") == call_id for c in message.tool_calls):
            return message
    return None


def _with_answers(
    request: ModelRequest, answers: list[DanglingAnswer]
) -> tuple[ModelRequest, list[Any] | None]:
    """The request with the answers in the model's view; the thread's state gets them too.

    They go into the state as one write ahead of the model node's own, so its reply
    lands after them, in the same step and commit. When ``create_agent`` rewrites the
    history itself this step (it answers malformed tool calls), that rewrite would
    drop them: they then come back as ``late``, the history a command after it sets.
    """
    if not answers:
        return request, None
    view = request.override(messages=cast(Any, insert_answers(request.messages, answers)))
    history = list(request.state["messages"])
    repaired = _private.agent_repairs(history)
    if repaired is not None:
        return view, [RemoveMessage(id=REMOVE_ALL_MESSAGES), *insert_answers(repaired, answers)]
    patched = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *insert_answers(history, answers)]
    _private.write_now(get_config(), "messages", patched)
    return view, None


def _names(tools: Iterable[Any]) -> list[str]:
    """The names of the tools among ``tools`` (a provider's built-in tool is a dict)."""
    return [str(tool.name) for tool in tools if isinstance(getattr(tool, "name", None), str)]


def _respond(response: ModelResponse, late: list[Any] | None) -> ModelCallResult:
    if late is None:
        return response
    # Commands apply after the node's own update: this one repeats the reply after the history.
    return ExtendedModelResponse(
        model_response=response, command=Command(update={"messages": [*late, *response.result]})
    )


class EffectMiddleware(AgentMiddleware):
    """Crash-safe effectful tool calls for ``create_agent``.

    Args:
        effects: tool name -> [`Effect`][langgraph_effects.Effect]; undeclared tools are
            blind effects, ``Effect.read_only()`` opts a tool out.
        ledger: default: the ledger of the agent's checkpointer.
        lease_seconds: as for [`EffectToolNode`][langgraph_effects.EffectToolNode].
        hash_key: as for [`EffectToolNode`][langgraph_effects.EffectToolNode].
        detect_replans: as for [`EffectToolNode`][langgraph_effects.EffectToolNode].

    Example:

        agent = create_agent(
            model, tools=[send_invoice],
            middleware=[ToolRetryMiddleware(), EffectMiddleware({"send_invoice": Effect(...)})],
            checkpointer=saver,
        )
    """

    def __init__(
        self,
        effects: Mapping[str, Effect] | None = None,
        *,
        ledger: Ledger | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        hash_key: bytes | None = None,
        detect_replans: bool = True,
    ) -> None:
        super().__init__()
        self._settings = Settings.build(
            effects, hash_key=hash_key, lease_seconds=lease_seconds, detect_replans=detect_replans,
            owner="EffectMiddleware",
        )
        check_ledger("EffectMiddleware", ledger)
        self.effects = dict(self._settings.effects)
        self.ledger = ledger
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()
        self._offered: set[str] = set()

    def _check_names(self, config: Mapping[str, Any], offered: Iterable[str]) -> None:
        """Refuse, before the agent's first model or tool call, an ``effects`` key that
        names none of its tools (the same check as ``EffectToolNode``'s, once per agent).

        The agent's tools are its ``ToolNode``'s; a tool another middleware adds at run
        time counts once a model request offers it (``offered``) or a call of it runs.
        """
        if not self.effects:
            return
        nodes = _private.graph_tool_nodes(config)
        if not nodes or all(node in self._checked for node in nodes):
            return
        self._offered.update(offered)
        tools = {name for node in nodes for name in node.tools_by_name} | self._offered
        check_tool_names("EffectMiddleware", self.effects, sorted(tools), where="this agent")
        self._checked.update(nodes)

    @property
    def name(self) -> str:
        return "EffectMiddleware"

    # -- dangling calls: answered from the ledger inside the model call, so no graph step --

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelCallResult:
        """Answer tool calls left without a ToolMessage from the ledger (see ``dangling``)
        in what the model reads and in the thread's state; otherwise just the call."""
        self._check_names(get_config(), _names(request.tools))
        if not unanswered(request.state.get("messages") or []):
            return handler(request)
        answers: list[DanglingAnswer] = _portal.run(self._find_answers(request, sync=True))
        request, late = _with_answers(request, answers)
        return _respond(handler(request), late)

    # The two async hooks are plain methods returning the awaitable of an ``async def``:
    # create_agent wraps every hook in langsmith's ``traceable``, whose wrapper hands an
    # ``async def`` hook's start and end to a thread at every call, tracing on or off,
    # and a turn through the middleware takes measurably longer for it
    # (docs/performance.md, "The middleware's async hooks"). The price: the hook's own
    # LangSmith span is empty, and the runs the call makes sit under the agent's
    # ``model`` and ``tools`` runs instead.

    def awrap_model_call(  # type: ignore[override]
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Awaitable[ModelCallResult]:
        """Async path of [`wrap_model_call`][langgraph_effects.EffectMiddleware.wrap_model_call]
        (returns the awaitable to await)."""
        return self._model_call(request, handler)

    async def _model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelCallResult:
        self._check_names(get_config(), _names(request.tools))
        if not unanswered(request.state.get("messages") or []):
            return await handler(request)
        request, late = _with_answers(request, await self._find_answers(request, sync=False))
        return _respond(await handler(request), late)

    async def _find_answers(self, request: ModelRequest, *, sync: bool) -> list[DanglingAnswer]:
        config = get_config()
        ledger = self.ledger or ledger_of(_private.checkpointer(config))
        if ledger is None:
            return []
        return await find_answers(
            list(request.state["messages"]),
            ledger=ledger,
            settings=self._settings,
            config=config,
            context=request.runtime.context if request.runtime is not None else None,
            sync_checkpointer=sync,
        )

    def _tracked(self, request: ToolCallRequest, asking: AIMessage | None) -> bool | None:
        """True: track it; False: run it as is; None: refuse it (no usable identity)."""
        call = request.tool_call
        if request.tool is None:
            return False
        # create_agent runs one task per call: count ids over the calls of the AIMessage
        # that holds this one, so a shared id is refused here as in EffectToolNode.
        calls = asking.tool_calls if asking is not None else [call]
        tracked, refused = effectful_calls(calls, self._settings, lambda _: True)
        call_id = str(call.get("id") or "")
        if call_id in refused and not self._settings.effect_for(request.tool.name).read_only_tool:
            return None
        if not args_valid(request.tool, call.get("args")):
            return False
        return any(str(c.get("id") or "") == call_id for c in tracked)

    def _open(
        self, request: ToolCallRequest, asking: AIMessage | None, *, sync: bool
    ) -> Coroutine[Any, Any, Session]:
        config = request.runtime.config
        ledger = self.ledger or ledger_of(_private.checkpointer(config))
        if ledger is None:
            raise NoLedgerError(
                "EffectMiddleware has no ledger: pass create_agent(checkpointer=AsyncEffectSqliteSaver(...)) "
                "(or AsyncEffectPostgresSaver, or attach_ledger(...)), or EffectMiddleware(ledger=...). "
                "Nothing was sent."
            )
        return Session.open(
            ledger=ledger,
            settings=self._settings,
            tool_calls=[request.tool_call],
            # The session reads the history only for the AIMessage holding the call:
            # hand it just that one, not the whole thread's history once per task.
            state=request.state if asking is None else {"messages": [asking]},
            config=config,
            context=request.runtime.context,
            sync_checkpointer=sync,
            check_args=lambda _, args: args_problem(request.tool, args),
        )

    def _take(
        self, request: ToolCallRequest, *, sync: bool
    ) -> ToolMessage | Coroutine[Any, Any, Session] | None:
        """The refusal of a call with no usable identity; ``None`` for a call run as it
        is; else the opening of the call's session (to await). ``sync``: for
        `wrap_tool_call`, which also refuses a tool with only an async implementation."""
        self._check_names(request.runtime.config, _names([request.tool]))
        asking = _asking(request.state, request.tool_call)
        tracked = self._tracked(request, asking)
        if tracked is None:
            return refusal(request.tool_call)
        if not tracked:
            return None
        effect = self._settings.effect_for(request.tool_call["name"])
        if effect.key_argument is not None:
            keys.check_request(request, effect)
        if sync:
            refuse_async_only_tool(request.tool, "EffectMiddleware")
        return self._open(request, asking, sync=sync)

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        """Sync path (``agent.invoke``)."""
        taken = self._take(request, sync=True)
        if taken is None:
            return handler(request)
        if isinstance(taken, ToolMessage):
            return taken
        call_id = str(request.tool_call["id"])
        session: Session = _portal.run(taken)
        tool = lambda: handler(approved_request(request, session))  # noqa: E731
        return run_call_rounds_sync(session, call_id, tool, _portal.run)  # type: ignore[no-any-return]

    def awrap_tool_call(  # type: ignore[override]
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> Awaitable[ToolResult]:
        """Async path (``agent.ainvoke``; returns the awaitable to await, see
        `awrap_model_call`)."""
        return self._tool_call(request, handler)

    async def _tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        taken = self._take(request, sync=False)
        if taken is None:
            return await handler(request)
        if isinstance(taken, ToolMessage):
            return taken
        call_id = str(request.tool_call["id"])
        session: Session = await taken
        tool = lambda: handler(approved_request(request, session))  # noqa: E731
        return await run_call_rounds(session, call_id, tool)  # type: ignore[no-any-return]
