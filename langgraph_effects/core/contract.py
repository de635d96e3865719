"""The effect contract: what a tool's provider can tell us after a crash.

What the provider can prove decides what recovery may do (see docs/architecture.md):

* a **dedup key** the provider honours within a window: re-send under the same key;
* an **authoritative lookup** by our key: confirm with its receipt, or re-send on
  proven absence (for an eventually consistent lookup, absence counts only after
  ``settle_after`` seconds, re-polled with bounded backoff);
* **blind** (neither): never re-send automatically, ask an operator;
* **read-only**: no ledger at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from ..errors import DefiniteFailure
from . import options as o
from ._fields import seconds
from .controls import Budget, CircuitBreaker, Controls, controls_of


@dataclass(frozen=True)
class Landed:
    """Lookup outcome: the provider has the effect. ``receipt`` is what it returned."""

    receipt: Any = None
    withdrawn: bool = False
    """The item exists but was withdrawn (HTTP 410): it did land, so never re-send."""


@dataclass(frozen=True)
class NotLanded:
    """Lookup outcome: the provider has no trace of the effect under our key."""


@dataclass(frozen=True)
class Inconclusive:
    """Lookup outcome: the provider could not say (an error, a timeout, a 5xx)."""

    reason: str = ""


LookupOutcome = Landed | NotLanded | Inconclusive
"""What a lookup answers: the effect landed, it did not, or the provider could not say."""


@dataclass(frozen=True)
class LookupRequest:
    """What a lookup callable receives: everything needed to find our effect."""

    operation_id: str
    provider_key: str
    tool: str
    args: Mapping[str, Any]
    """The full arguments the model sent (not redacted: the lookup runs in the worker)."""
    attempt: int


Lookup = Callable[[LookupRequest], Awaitable[LookupOutcome]]
"""A tool's lookup: ``async (LookupRequest) -> Landed | NotLanded | Inconclusive``."""
KeyFunction = Callable[[Mapping[str, Any], Mapping[str, Any]], str]
"""``(args, config) -> str``: the logical provider key of a call (see `Effect`)."""
ApprovalMode = Literal["never", "always"]
"""Whether a call waits for a human approval before its first send."""


@o.checked_options
@dataclass(frozen=True)
class Effect:
    """The per-tool contract. Declare one per effectful tool; undeclared tools are blind.

    Args:
        dedup_window: the provider deduplicates requests carrying our provider key
            for this long (Stripe keeps keys at least 24 hours). Within the window a
            crashed call is re-sent under the same key; past it, it goes to review.
        lookup: ``async (LookupRequest) -> Landed | NotLanded | Inconclusive``, an
            authoritative query by our key or reference.
        lookup_consistency: ``"strong"`` (absence is proof) or ``"eventual"``
            (absence is proof only after ``settle_after`` seconds since dispatch).
        settle_after: for eventual lookups, how long after dispatch a "not found"
            becomes believable.
        lookup_timeout: a lookup that takes longer counts as inconclusive.
        lookup_attempts: how many times to poll before giving up (bounded backoff).
        definite_errors: exception types that mean the provider did nothing
            (e.g. a 422, a 429). They make the operation ``failed``; raised to the
            caller, a retry of it (``RetryPolicy``, ``ToolRetryMiddleware``, a resume)
            is a new attempt under the same key (see ``docs/retries.md``). Everything
            else is ambiguous. [`DefiniteFailure`][langgraph_effects.errors.DefiniteFailure] is always
            definite.
        key: ``(args, config) -> str``, a logical provider key such as
            ``"invoice:tenant-7:2026-08-11:send"``. Calls that produce the same key
            in one tenant are the same operation. Default: derived from the
            operation id (opaque, unique per tenant).
        secret_fields: argument names stored redacted in the ledger and hidden
            from interrupts and the console.
        approval: ``"always"`` to require a human approval (bound to the
            arguments' hash, single use) before the first dispatch.
        max_attempts: the most sends (first dispatch included) reconciliation may
            make before asking an operator. A send that a worker death or a lost
            lease ended, or that was handed back unsent, is not counted: the dedup
            window or the lookup decides those re-sends (see ``docs/retries.md``).
        key_argument: the name of a tool argument that receives the operation's
            provider key on every send (for example ``"idempotency_key"``, or an MCP
            tool's idempotency parameter). The key replaces whatever the model put
            there and is the same on every re-send and resume of the operation. The
            tool's input schema must have that argument (checked when the node is
            built, or on the middleware's first call of the tool).
        budgets: durable [`Budget`][langgraph_effects.Budget]s this tool's sends count
            against (shared by every tool listing a budget of the same name): a send
            over budget is refused, or held for an approver (see ``docs/budgets.md``).
        circuit: a durable [`CircuitBreaker`][langgraph_effects.CircuitBreaker] for this tool's
            provider: while it is open, sends are refused before anything leaves
            (see ``docs/circuit-breakers.md``).
        read_only_tool: see [`read_only`][langgraph_effects.Effect.read_only].
        compensate: how to undo an effect that landed (an [`Undo`][langgraph_effects.Undo], or the undo
            tool or function itself): run exactly once, as its own operation with its
            own contract, when an operator decides the effect must not stand, or when
            a later step of a saga fails definitively (see ``docs/compensation.md``).
            ``None``: the effect cannot be undone (compensation requests are refused
            and reported, never guessed at).
        saga: the saga this tool's calls belong to: a name, or ``(args, config) -> str``
            naming one saga instance (``lambda args, config: f"trip:{args['trip']}"``).
            Recorded at intent. When a call of a saga fails definitively and the model
            is answered with the failure, the earlier confirmed effects of the same saga
            in the same thread are undone, newest first, each exactly once; those in
            doubt are left for review, those without an undo are reported.
    """

    dedup_window: float | timedelta | None = None
    lookup: Lookup | None = None
    lookup_consistency: Literal["strong", "eventual"] = "strong"
    settle_after: float | timedelta = 0.0
    lookup_timeout: float | timedelta = 10.0
    lookup_attempts: int = 5
    definite_errors: Sequence[type[BaseException]] = ()
    key: KeyFunction | None = None
    secret_fields: Sequence[str] = ()
    approval: ApprovalMode = "never"
    max_attempts: int = 3
    key_argument: str | None = None
    budgets: Sequence[Budget] = ()
    circuit: CircuitBreaker | None = None
    read_only_tool: bool = False
    compensate: Undo | Callable[..., Any] | None = None
    saga: str | KeyFunction | None = None

    kind: str = field(init=False, repr=False, compare=False)
    """The contract's name as recorded in the ledger (``"blind"``, ``"dedup"``,
    ``"lookup"``, ``"lookup-eventual"`` or ``"read-only"``), set at construction."""

    controls: Controls | None = field(init=False, repr=False, compare=False)
    """Its budgets and circuit breaker (``None`` when it declares neither), set at
    construction."""

    def __post_init__(self) -> None:
        o.check_all("Effect", self, _EFFECT_OPTIONS)
        if self.compensate is not None and not isinstance(self.compensate, Undo):
            object.__setattr__(self, "compensate", Undo(self.compensate))
        if self.compensate is not None and self.read_only_tool:
            raise o.refuse("Effect", "compensate", self.compensate, _EFFECT_OPTIONS["compensate"],
                           "A read-only tool has no effect to compensate: drop compensate=.")
        object.__setattr__(self, "kind", _kind(self))
        object.__setattr__(self, "budgets", tuple(self.budgets))
        object.__setattr__(self, "definite_errors", tuple(self.definite_errors))
        object.__setattr__(self, "secret_fields", tuple(self.secret_fields))
        controls = controls_of(self.budgets, self.circuit)
        object.__setattr__(self, "controls", controls if controls.budgets or controls.circuit else None)

    @classmethod
    def read_only(cls) -> Effect:
        """A tool with no side effects: it runs exactly like under ``ToolNode``, unrecorded."""
        return cls(read_only_tool=True)

    @classmethod
    def blind(cls, **kwargs: Any) -> Effect:
        """A provider that can neither dedup nor be queried: ambiguity goes to review."""
        return cls(**kwargs)

    @property
    def dedup_seconds(self) -> float | None:
        """``dedup_window`` in seconds (``None``: the provider does not deduplicate)."""
        return seconds(self.dedup_window)

    @property
    def settle_seconds(self) -> float:
        """``settle_after`` in seconds."""
        return seconds(self.settle_after) or 0.0

    @property
    def lookup_timeout_seconds(self) -> float:
        """``lookup_timeout`` in seconds (``0``: no timeout)."""
        return seconds(self.lookup_timeout) or 0.0

    def is_definite(self, error: BaseException) -> bool:
        """Whether ``error`` proves the provider did nothing."""
        return isinstance(error, (DefiniteFailure, *self.definite_errors))

    def saga_of(self, args: Mapping[str, Any], config: Mapping[str, Any]) -> str | None:
        """The saga instance a call with ``args`` belongs to (``None``: none)."""
        if self.saga is None:
            return None
        return self.saga if isinstance(self.saga, str) else str(self.saga(args, config))

    @property
    def undo(self) -> Undo | None:
        """The declared [`Undo`][langgraph_effects.Undo] (``compensate=`` normalized), or ``None``."""
        return self.compensate if isinstance(self.compensate, Undo) else None


@dataclass(frozen=True)
class UndoRequest:
    """What an [`Undo`][langgraph_effects.Undo]'s ``args`` function receives: the effect to undo."""

    operation_id: str
    """The id of the operation being undone."""
    provider_key: str
    """The provider key it was sent under (often what the provider's cancel takes)."""
    tool: str
    args: Mapping[str, Any]
    """Its arguments as the ledger stores them (secret fields redacted)."""
    receipt: Any = None
    """What proved it landed: the tool's recorded output, a lookup's or an operator's receipt."""


UndoArgs = Callable[[UndoRequest], Mapping[str, Any]]
"""``(UndoRequest) -> dict``: the undo's arguments, derived from the effect it undoes."""


@o.checked_options
@dataclass(frozen=True)
class Undo:
    """How to undo an effect that landed (``Effect(compensate=Undo(...))``).

    The undo is an effectful call of its own: it runs through the same protocol as a
    tool call, as a separate operation bound to the one it undoes, under its own
    provider key (derived from the undone operation's id: the same on every resume),
    with its own contract (``effect``) deciding what recovery may do if a crash
    leaves it in doubt.

    Args:
        action: the undo itself: a LangChain tool (invoked with the arguments), or a
            function, sync or async, called with them as keyword arguments. Inside
            it, [`current_operation`][langgraph_effects.current_operation] is the undo's operation
            (its ``provider_key`` is the undo's idempotency key).
        args: ``(UndoRequest) -> dict``, the undo's arguments. Default:
            ``{"provider_key": <the undone operation's provider key>}``.
        effect: the undo's contract (dedup window, lookup, definite errors, key
            argument...). Default: blind, so an undo left in doubt by a crash goes
            to review rather than being sent twice.
        name: the undo's tool name in the ledger (default: the tool's name or the
            function's ``__name__``).
    """

    action: Callable[..., Any]
    args: UndoArgs | None = None
    effect: Effect | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        o.check_all("Undo", self, _UNDO_OPTIONS)
        if self.effect is not None and (self.effect.read_only_tool or self.effect.compensate is not None):
            raise o.refuse(
                "Undo", "effect", self.effect, _UNDO_OPTIONS["effect"],
                "An undo's own effect must be effectful and cannot itself be compensated "
                "(undo an undo by hand).",
            )
        if self.effect is not None and (self.effect.approval != "never" or self.effect.saga is not None):
            raise o.refuse(
                "Undo", "effect", self.effect, _UNDO_OPTIONS["effect"],
                "An undo runs outside the graph's turns: its effect cannot wait for an approval or "
                "belong to a saga (approve the compensation itself: it is an operator's call).",
            )

    @property
    def tool_name(self) -> str:
        """The name the undo is recorded under."""
        return self.name or str(
            getattr(self.action, "name", None) or getattr(self.action, "__name__", "undo")
        )

    @property
    def contract(self) -> Effect:
        """The undo's own contract (blind when none was declared)."""
        return self.effect if self.effect is not None else BLIND

    def arguments(self, request: UndoRequest) -> dict[str, Any]:
        """The undo's arguments for ``request``."""
        if self.args is None:
            return {"provider_key": request.provider_key}
        made = self.args(request)
        if not isinstance(made, Mapping):
            raise TypeError(f"Undo(args=...) must return a mapping, not {type(made).__name__}")
        return dict(made)


def _kind(effect: Effect) -> str:
    """The contract's name as recorded in the ledger."""
    if effect.read_only_tool:
        return "read-only"
    if effect.lookup is not None:
        return "lookup-eventual" if effect.lookup_consistency == "eventual" else "lookup"
    if effect.dedup_window is not None:
        return "dedup"
    return "blind"


_KEY_FUNCTION = o.function("a function (args, config) -> str")

#: What each option of `Effect` accepts (checked when it is made).
_EFFECT_OPTIONS: dict[str, o.Accepts] = {
    "dedup_window": o.optional(o.duration(positive=True)),
    "lookup": o.optional(
        o.function("an async function (LookupRequest) -> Landed | NotLanded | Inconclusive")
    ),
    "lookup_consistency": o.one_of("strong", "eventual"),
    "settle_after": o.duration(),
    "lookup_timeout": o.duration(),
    "lookup_attempts": o.whole(1),
    "definite_errors": o.exception_types(),
    "key": o.optional(_KEY_FUNCTION),
    "secret_fields": o.names(),
    "approval": o.one_of("never", "always"),
    "max_attempts": o.whole(1),
    "key_argument": o.optional(o.name()),
    "budgets": o.each(o.instance(Budget, "a Budget"), "a list or tuple of Budget objects"),
    "circuit": o.optional(o.instance(CircuitBreaker, "a CircuitBreaker")),
    "read_only_tool": o.flag(),
    "compensate": o.optional(o.Accepts(
        "an Undo, or the undo tool or function itself",
        lambda v: isinstance(v, Undo) or callable(v) or hasattr(v, "ainvoke"),
    )),
    "saga": o.optional(o.either(o.name(), _KEY_FUNCTION)),
}

#: What each option of `Undo` accepts.
_UNDO_OPTIONS: dict[str, o.Accepts] = {
    "action": o.Accepts("a LangChain tool or a function", lambda v: callable(v) or hasattr(v, "ainvoke")),
    "args": o.optional(o.function("a function (UndoRequest) -> dict")),
    "effect": o.optional(o.instance(Effect, "an Effect")),
    "name": o.optional(o.name()),
}

#: The contract of a tool nobody declared: safe by default.
BLIND = Effect()
