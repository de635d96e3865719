"""The exception hierarchy.

Everything the package raises on purpose derives from [`EffectsError`][langgraph_effects.errors.EffectsError],
so a caller can catch the package as a whole or one precise failure:

    EffectsError
    ├── ConfigurationError          the graph or node is set up in a way we cannot make safe
    │   ├── InvalidOptionError      an option of the wrong type, unit or name (also ValueError)
    │   ├── NoLedgerError           no ledger was given and the checkpointer carries none
    │   ├── DurabilityError         durability="exit" (or another mode that loses the call)
    │   ├── MissingExtraError       an optional dependency is not installed (also ModuleNotFoundError)
    │   ├── TargetNotFoundError     a MODULE:ATTR name (a graph factory, a probe) that does not import
    │   ├── SyncMismatchError       an async-only saver in a sync run, or a sync-only one in an async run
    │   ├── UnknownBackendError     a ledger URL whose scheme no backend is registered for
    │   └── UnsupportedByBackendError  asked a backend for what it does not offer (a checkpointer)
    ├── LedgerError                 the durable store cannot be used
    │   ├── LedgerCorruptError      not a database, or a foreign schema under our table names
    │   ├── SchemaTooNewError       written by a newer langgraph-effects
    │   ├── SchemaBehindError       not migrated yet to this langgraph-effects' schema
    │   │   └── NotSetUpError       an Effect saver used before its setup() ever ran
    │   ├── LedgerNotFoundError     the console was pointed at a database that holds no ledger
    │   └── LedgerUnavailableError  locked, read-only, full or unreachable right now
    ├── TransitionError             a state change the ledger refused; nothing was written
    │   ├── IllegalTransitionError  the state machine does not allow it
    │   │   └── NotResolvableError  a verdict for an operation with nothing in doubt
    │   ├── ApprovalError           a gated dispatch without a matching, unused approval
    │   ├── StaleVersionError       someone moved the operation since you read it
    │   ├── LeaseLiveError          a verdict while a worker is sending it right now
    │   ├── VerdictNotRecordedError an expired lease was recorded, the verdict was not
    │   ├── DecisionConflictError   a decision id reused with different content
    │   ├── UnresolvedOperationsError  a thread deleted while operations of it are unresolved
    │   └── OperationNotFoundError
    ├── ThreadConflictError         another runner moved the thread on: this run was stopped
    ├── NondeterminismError         a Functional API entrypoint changed its call order: stopped
    ├── ReviewError                 an operator answer that cannot be applied
    │   └── NothingToResumeError    the thread has no checkpoint, or waits for no review
    ├── CompensationError           an effect that cannot be undone now (nothing landed, no undo...)
    ├── MalformedToolCallError      a model's call with no usable identity: refused, not sent
    ├── ControlRefusedError         a send refused by a budget or a circuit breaker: not sent
    │   ├── BudgetExceededError     the send would exceed a durable budget
    │   └── CircuitOpenError        the provider's circuit breaker is open
    ├── OversizedError              a receipt or evidence text over its documented limit
    ├── UnencodableValueError       an id, key or verdict that cannot be stored as it is (a lone surrogate)
    └── DefiniteFailure             raised by a tool: the provider definitely did nothing

Errors about one operation or one ledger carry what they are about as attributes
(``op_id``, ``expected``/``actual`` versions, ``where``/``path``...), so a caller
can act on them without parsing the message. The messages say what was wrong and
what to do in terms of this API; the console (``langgraph_effects.cli``) prints its
own advice, naming its commands and flags, from the same attributes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .core.operation import Event, Operation, Owner


class EffectsError(Exception):
    """Base class of every error langgraph-effects raises on purpose."""

    kind: ClassVar[str | None] = None
    """What the console's ``--json`` error output calls it (``None``: by its exit code)."""

    def _record(self, message: str, **fields: Any) -> None:
        """Set the message and the attributes that say what the error is about."""
        Exception.__init__(self, message)
        for name, value in fields.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle restores the message and the attributes as they are: calling the class
        # again, as Exception does, fails for every error with its own constructor.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[EffectsError], args: tuple[Any, ...], fields: dict[str, Any]) -> EffectsError:
    error = cls.__new__(cls, *args)
    error.args = args
    for name, value in fields.items():
        setattr(error, name, value)
    return error


class ConfigurationError(EffectsError):
    """The graph or node is configured in a way the package cannot make crash-safe."""


class InvalidOptionError(ConfigurationError, ValueError):
    """An option given to `Effect`, ``Budget``,
    ``CircuitBreaker``, ``Undo`` or an integration (``EffectToolNode``,
    ``EffectMiddleware``, ``@effectful``) that is of the wrong type, unit or name.
    Raised when the object is made (for ``EffectMiddleware``'s ``effects`` names, before
    the agent's first model or tool call): nothing was recorded or sent.

    Attributes: ``owner`` (what was being made, e.g. ``"Effect"``), ``option`` (the
    option's name), ``given`` (what was given) and ``accepts`` (what the option takes,
    in words). Also a `ValueError`.
    """

    owner: str
    option: str
    given: Any
    accepts: str

    def __init__(self, message: str, *, owner: str, option: str, given: Any, accepts: str) -> None:
        self._record(message, owner=owner, option=option, given=given, accepts=accepts)


class NoLedgerError(ConfigurationError):
    """An effectful call ran with no ledger to record it in."""


class DurabilityError(ConfigurationError):
    """The graph's durability mode would let a dispatched call vanish on a crash."""


class MissingExtraError(ConfigurationError, ModuleNotFoundError):
    """A name that needs an optional dependency which is not installed.

    Also a `ModuleNotFoundError`, so ``except ImportError`` still catches it.
    Attributes: ``feature`` (what was asked for), ``module`` (the missing module) and
    ``extra`` (the ``langgraph-effects[...]`` extra that installs it).
    """

    def __init__(self, feature: str, module: str, extra: str) -> None:
        self._record(
            f"{feature} needs {module}, which is not installed. Install it with the "
            f'{extra!r} extra: pip install "langgraph-effects[{extra}]"',
            feature=feature,
            module=module,
            extra=extra,
        )
        self.name = module

    def __reduce__(self) -> tuple[Any, ...]:
        # ImportError keeps ``name`` outside ``__dict__``, which EffectsError's pickle takes.
        restore, (cls, args, fields) = super().__reduce__()
        return (restore, (cls, args, {**fields, "name": self.name}))


class TargetNotFoundError(ConfigurationError):
    """A ``MODULE:ATTR`` name (``--graph``, a crash test's factory or probe) that cannot be loaded.

    Attributes: ``target`` (as given), ``module``, ``attribute``, ``path`` (the file
    the module was imported from, ``None`` when it was not) and ``reason``: the advice
    for this case (module not on the path, the module failed to import, or it has no
    such attribute).
    """

    target: str
    module: str
    attribute: str
    path: str | None
    reason: str

    def __init__(self, target: str, module: str, attribute: str, path: str | None, reason: str) -> None:
        self._record(
            f"{target}: {reason}", target=target, module=module, attribute=attribute, path=path, reason=reason
        )


class SyncMismatchError(ConfigurationError):
    """An async-only object in a sync run (``invoke``/``stream``), or a sync-only one in
    an async run (``ainvoke``/``astream``): an async saver, a sync saver, a tool with only
    an async implementation. Raised before anything is read, saved or sent.

    Attributes: ``used`` (what was used: a class or a tool's name) and ``use`` (what to
    use instead).
    """

    used: str
    use: str

    def __init__(self, message: str, *, used: str, use: str) -> None:
        self._record(message, used=used, use=use)


class UnknownBackendError(ConfigurationError, ValueError):
    """A ledger URL (``--db``, `open_ledger`) whose
    scheme no backend is registered for.

    Attributes: ``scheme``, ``url`` (password starred out) and ``known`` (the schemes
    registered). Also a `ValueError`: the console answers it as bad input.
    """

    kind = "unknown_backend"

    scheme: str
    url: str
    known: list[str]

    def __init__(self, scheme: str, url: str, known: list[str]) -> None:
        self._record(
            f"no ledger backend is registered for the scheme {scheme!r} (in {url!r}); known schemes: "
            f"{', '.join(known)}. Give a SQLite path, a postgresql:// DSN or memory://, or register "
            f"the backend first: langgraph_effects.ledger.kit.register_backend({scheme!r}, factory) "
            "(or in the 'langgraph_effects.backends' entry-point group of its package).",
            scheme=scheme, url=url, known=known,
        )


class UnsupportedByBackendError(ConfigurationError, ValueError):
    """A ledger backend was asked for something it does not offer (e.g. a checkpointer).

    Attributes: ``scheme`` and ``feature``.
    """

    kind = "unsupported_by_backend"

    scheme: str
    feature: str

    def __init__(self, scheme: str, feature: str) -> None:
        self._record(
            f"the {scheme} ledger backend offers no {feature}. Use a SQLite path or a "
            f"postgresql:// DSN for this, or register a {feature} with the {scheme!r} backend "
            "(see langgraph_effects.ledger.kit.Backend).",
            scheme=scheme, feature=feature,
        )


class LedgerError(EffectsError):
    """The durable operation store cannot be used."""

    kind = "ledger_unavailable"


class LedgerCorruptError(LedgerError):
    """The file is not a database, or holds tables under our names that we did not write."""

    kind = "ledger_corrupt"


class SchemaTooNewError(LedgerError):
    """The ledger was migrated by a newer langgraph-effects than the one running."""

    kind = "schema_too_new"

    found: int
    supported: int
    where: str

    def __init__(self, found: int, supported: int, where: str) -> None:
        self._record(
            f"the ledger at {where} has schema version {found}, but this "
            f"langgraph-effects understands versions up to {supported}. Upgrade "
            "langgraph-effects on this machine; nothing was changed.",
            found=found, supported=supported, where=where,
        )


class SchemaBehindError(LedgerError):
    """The ledger is at an older schema version than this langgraph-effects needs.

    Only ``setup()`` migrates (the console's ``setup`` command runs it): a command
    that merely reads or decides never changes the schema behind the workers' backs.
    """

    kind = "schema_behind"

    found: int
    needed: int
    where: str
    what: str
    """The fact alone, without the advice (which the console words its own way)."""

    def __init__(self, found: int, needed: int, where: str) -> None:
        what = (
            f"the ledger at {where} is at schema version {found}, but this langgraph-effects "
            f"needs {needed}:"
        )
        self._record(
            f"{what} migrate it first with the graph's saver.setup() (or the ledger's own "
            "setup()). Nothing was changed.",
            found=found, needed=needed, where=where, what=what,
        )


class NotSetUpError(SchemaBehindError):
    """An Effect saver used before its ``setup()`` ever ran on the database: the
    checkpoint tables or the ledger are missing. Raised at the saver's first use,
    the same on SQLite and Postgres, before anything is read, saved or sent.

    Attributes: ``where`` and ``missing`` (what is not there, in words).
    """

    missing: str

    def __init__(self, saver: str, where: str, missing: str, needed: int) -> None:
        message = (
            f"{saver}: {where} has no {missing} yet. Run the saver's setup() once after opening it "
            "and before the first run (`await saver.setup()`; `saver.setup()` on a sync saver): it "
            "creates the checkpoint tables and the ledger. Nothing was read, saved or sent."
        )
        LedgerError.__init__(self, message)
        self.found, self.needed, self.where, self.what, self.missing = 0, needed, where, message, missing


class LedgerUnavailableError(LedgerError):
    """The store refused the write right now (locked, read-only, disk full, unreachable).

    Nothing was half-written: the transaction was rolled back. Retrying later is safe.
    """


class TransitionError(EffectsError):
    """A state change that the ledger refused. Nothing was written."""


class IllegalTransitionError(TransitionError):
    """The operation state machine does not allow this event in this state."""

    kind = "illegal_transition"

    op_id: str
    state: str
    event: str

    def __init__(self, op_id: str, state: str, event: str) -> None:
        self._record(
            f"operation {op_id} is {state!r}; the event {event!r} is not allowed from there "
            "(see langgraph_effects.core.operation.TRANSITIONS)",
            op_id=op_id, state=state, event=event,
        )


class ApprovalError(TransitionError):
    """A dispatch that needs a human approval did not carry a valid one.

    The approval is missing, was given for other arguments (its args hash differs),
    or was already used. Nothing was written.
    """

    op_id: str

    def __init__(self, op_id: str, why: str) -> None:
        self._record(f"operation {op_id} cannot be dispatched: {why}", op_id=op_id)


class StaleVersionError(TransitionError):
    """The operation moved on since the caller read it (compare-and-set failed)."""

    kind = "stale_version"

    op_id: str
    expected: int
    actual: int
    what: str
    """The fact alone, without the advice (which the console words its own way)."""

    def __init__(self, op_id: str, expected: int, actual: int) -> None:
        what = f"operation {op_id} is at version {actual}, not {expected}: it changed since you read it."
        self._record(
            f"{what} Read it again (operator.show or Ledger.get) and decide on what it is now.",
            op_id=op_id, expected=expected, actual=actual, what=what,
        )


class DecisionConflictError(TransitionError):
    """A decision id was reused with different content."""

    kind = "decision_conflict"

    op_id: str
    decision_id: str

    def __init__(self, op_id: str, decision_id: str) -> None:
        self._record(
            f"decision {decision_id!r} was already applied to operation {op_id} with different "
            "content. Use a new decision id for a new decision.",
            op_id=op_id, decision_id=decision_id,
        )


class OperationNotFoundError(TransitionError):
    """No operation with that id exists in this ledger (or in the caller's tenant)."""

    kind = "not_found"

    op_id: str

    def __init__(self, op_id: str) -> None:
        self._record(f"no operation {op_id!r} in this ledger", op_id=op_id)


class ThreadConflictError(EffectsError):
    """Another runner already moved this thread on from the checkpoint this run started at.

    Raised by ``AsyncEffectSqliteSaver`` / ``AsyncEffectPostgresSaver`` when a run tries to save
    a second child of a checkpoint (two runners resumed one thread at once: a worker
    and ``recover()``, a run delivered twice, a restarted worker). The run stops there;
    the checkpoint it tried to save, and the pending writes it tried to store on a
    checkpoint the other runner already moved past, were not saved. The other runner
    owns the thread: read its state, and resume it again only if it still needs work.
    Deliberate branches (replaying from a ``checkpoint_id``, ``update_state``) are not
    refused.
    """

    thread_id: str
    checkpoint_ns: str
    parent_id: str | None
    child_id: str | None

    def __init__(
        self,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str | None,
        child_id: str | None,
        *,
        what: str = "checkpoint",
    ) -> None:
        where = f"thread {thread_id!r}" + (f" (namespace {checkpoint_ns!r})" if checkpoint_ns else "")
        if parent_id is None:
            started = "a new thread, but another runner already saved its first checkpoint"
        else:
            started = (
                f"checkpoint {parent_id}, but another runner already saved checkpoint {child_id} "
                "after it"
            )
        self._record(
            f"{where} is being run by another runner: this run started from {started}. This run "
            f"was stopped and its {what} was not saved, so nothing of it landed in the thread. "
            "Only one runner may advance a thread at a time. Read the thread's state "
            "(graph.aget_state) and resume it again only if it still has work left; to branch "
            "on purpose, start the run from an earlier checkpoint_id or use update_state.",
            thread_id=thread_id, checkpoint_ns=checkpoint_ns, parent_id=parent_id, child_id=child_id,
        )


def _call_text(tool: str | None, args: Any) -> str:
    if tool is None:
        return "a task that is not @effectful"
    if not isinstance(args, dict):
        return f"{tool}(...)"
    return f"{tool}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


class NondeterminismError(EffectsError):
    """A Functional API entrypoint called its tasks in another order than the run it resumes.

    LangGraph answers the *n*-th task call of a resumed entrypoint with the result saved
    for the *n*-th call of the run before, whatever is called there now. Raised by the
    next ``@effectful`` call after such a place, before anything is sent: the call
    recorded there (``recorded_tool``, ``recorded_args``, ``recorded_op_id``) is not the
    call made there now (``called_tool``, ``called_args``), which was never run and got
    the other call's result. Replaying the thread from ``checkpoint_id`` once the
    entrypoint is deterministic runs every call again, each bound to its own operation.
    """

    thread_id: str
    entrypoint: str
    position: int
    recorded_tool: str
    recorded_args: dict[str, Any] | None
    recorded_op_id: str | None
    called_tool: str | None
    called_args: dict[str, Any] | None
    checkpoint_id: str | None

    def __init__(
        self,
        thread_id: str,
        entrypoint: str,
        position: int,
        recorded: tuple[str, dict[str, Any] | None, str | None],
        called: tuple[str | None, dict[str, Any] | None],
        checkpoint_id: str | None,
    ) -> None:
        recorded_tool, recorded_args, recorded_op_id = recorded
        called_tool, called_args = called
        then = _call_text(recorded_tool, recorded_args)
        now = _call_text(called_tool, called_args)
        replay = (
            f"replay the thread from checkpoint {checkpoint_id!r} (invoke(None, {{'configurable': "
            f"{{'thread_id': {thread_id!r}, 'checkpoint_id': {checkpoint_id!r}}}}})): every call "
            "then runs and finds its own operation, so nothing recorded is sent twice"
            if checkpoint_id
            else "replay the thread from the checkpoint holding the entrypoint's input"
        )
        self._record(
            f"entrypoint {entrypoint!r} of thread {thread_id!r} is not deterministic: its task call "
            f"#{position} was {then} when the thread ran before (operation {recorded_op_id}), but "
            f"this run called {now} there, and LangGraph answered it with the result of {then} "
            "without running it. The run was stopped before anything else was sent. Make the "
            "entrypoint call its tasks in the same order on every run (iterate sorted(set(...)), "
            "not set(...); read changing inputs inside a @task, or pass them as input), then "
            f"{replay}.",
            thread_id=thread_id, entrypoint=entrypoint, position=position,
            recorded_tool=recorded_tool, recorded_args=recorded_args, recorded_op_id=recorded_op_id,
            called_tool=called_tool, called_args=called_args, checkpoint_id=checkpoint_id,
        )


class ReviewError(EffectsError):
    """An operator answer that cannot be applied (unknown operation, wrong shape)."""

    kind = "bad_input"


class NothingToResumeError(ReviewError):
    """A resume of a thread that has nothing to resume: no checkpoint at all (a
    mistyped ``thread_id``, or a graph compiled with another checkpointer than the one
    the thread ran with), or no effect review waiting. Nothing was sent.

    Attributes: ``thread_id`` (``None`` when only interrupts were given) and
    ``has_checkpoint``.
    """

    thread_id: str | None
    has_checkpoint: bool

    def __init__(self, message: str, *, thread_id: str | None, has_checkpoint: bool) -> None:
        self._record(message, thread_id=thread_id, has_checkpoint=has_checkpoint)


class CompensationError(EffectsError):
    """An effect that cannot be compensated now; nothing was written.

    ``verdict`` names the rule (``not_landed``, ``irreversible``, ``in_flight``,
    ``awaiting_review``, ``is_undo``, ``key_taken``; see
    `langgraph_effects.core.compensation.may_compensate`), ``reason`` says why.
    """

    kind = "not_compensable"

    op_id: str
    verdict: str
    reason: str

    def __init__(self, op_id: str, verdict: str, reason: str) -> None:
        self._record(
            f"operation {op_id} cannot be compensated: {reason}. Nothing was changed.",
            op_id=op_id, verdict=verdict, reason=reason,
        )


class MalformedToolCallError(EffectsError):
    """A model's effectful call that has no usable identity, so it was refused, never sent.

    No id, an id shared with another call of the same message, or an id that is not
    valid text (an unpaired surrogate). The model is answered with an error ToolMessage
    saying so (its artifact names this class); the thread carries on.
    """

    tool: str
    tool_call_id: str
    why: str

    def __init__(self, tool: str, tool_call_id: str, why: str) -> None:
        self._record(
            f"The {tool} call was not sent: it {why}, so it cannot be tracked safely. Call the "
            "tool again, one call per id.",
            tool=tool, tool_call_id=tool_call_id, why=why,
        )


class ControlRefusedError(EffectsError):
    """A send refused by a budget or a circuit breaker before anything left.

    The model is answered with an error ToolMessage whose artifact names the subclass
    (``{"error": "BudgetExceededError", "sent": False, "control": ...}``); nothing is
    raised to the graph. ``control`` is the budget's or breaker's name.
    """

    tool: str
    control: str
    reason: str

    def __init__(self, tool: str, control: str, reason: str) -> None:
        self._record(
            f"The {tool} call was not sent: {reason}.",
            tool=tool, control=control, reason=reason,
        )


class BudgetExceededError(ControlRefusedError):
    """The send would exceed a durable [`Budget`][langgraph_effects.Budget]: not sent."""


class CircuitOpenError(ControlRefusedError):
    """The provider's [`CircuitBreaker`][langgraph_effects.CircuitBreaker] is open: not sent."""


class OversizedError(EffectsError, ValueError):
    """A receipt or an evidence text larger than its documented limit: refused, nothing written.

    See `langgraph_effects._runtime.messages.MAX_RECEIPT_BYTES` and
    `MAX_EVIDENCE_CHARS`. ``what`` names the value,
    ``size`` and ``limit`` are in ``unit`` (``"bytes"`` or ``"characters"``);
    `overage` says just that, without claiming what was or was not written.
    """

    what: str
    size: int
    limit: int
    unit: str

    def __init__(self, what: str, size: int, limit: int, unit: str, advice: str) -> None:
        overage = _overage(what, size, limit, unit)
        self._record(
            f"{overage}; nothing was recorded. {advice}", what=what, size=size, limit=limit, unit=unit
        )

    @property
    def overage(self) -> str:
        """``"the reason is 5,000 characters, over the 4,096-character limit"``."""
        return _overage(self.what, self.size, self.limit, self.unit)


class UnencodableValueError(EffectsError, ValueError):
    """An id, a key or an operator's verdict that cannot be stored or hashed as it is:
    refused before anything was sent or written.

    Text holding an unpaired surrogate (``"t\\ud800"``) has no UTF-8 form, so no
    database, checkpoint or id digest takes it; a receipt must be JSON. Raised for a
    thread id, checkpoint namespace, tenant id or policy version (by the savers and by
    every effectful call), an ``Effect(key=...)`` key, and a verdict's decision id,
    actor, receipt, note or reason (see ``docs/tenants-secrets-strings.md``).

    Attributes: ``field`` (the value, as the caller gave it: ``"config['configurable']
    ['tenant_id']"``), ``where`` (the part of it that is wrong, printable), ``why`` and
    ``advice``. Also a `ValueError`: the console answers it as bad input.
    """

    kind = "bad_input"

    field: str
    where: str
    why: str
    advice: str

    def __init__(self, field: str, where: str, why: str, advice: str) -> None:
        self._record(
            f"{where} {why}; nothing was sent or written. {advice}",
            field=field, where=where, why=why, advice=advice,
        )


def _overage(what: str, size: int, limit: int, unit: str) -> str:
    measure = " as JSON" if unit == "bytes" else ""
    return f"the {what} is {size:,} {unit}{measure}, over the {limit:,}-{unit.rstrip('s')} limit"


class DefiniteFailure(EffectsError):
    """Raise from a tool when the provider definitely did not apply the effect.

    The operation becomes ``failed`` (terminal) and is never reconciled or re-sent:
    like Temporal's ``non_retryable=True``, it tells the ledger this attempt is settled.
    Use it for validation errors (HTTP 4xx other than 408/409/429) and the like.
    """

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.details = details


# -- raised by the operator API and console --------------------------------------------


class LedgerNotFoundError(LedgerError):
    """The database named as the ledger does not exist, or holds no ledger.

    Nothing is created: an operator who mistypes a path or a database name must not
    be told "nothing unresolved" by a brand-new empty ledger. `postgres` and
    `empty` say which case it is (a Postgres database without our tables in
    `schema`; a SQLite file without them; or no file at all).
    """

    kind = "ledger_not_found"

    path: str
    empty: bool
    """The database exists but holds no ledger (always true for Postgres)."""
    postgres: bool
    schema: str | None
    backend: str
    """The scheme of the backend that found no ledger (``sqlite``, ``postgresql``, ...)."""
    what: str
    """The fact alone, without the advice (which the console words its own way)."""

    def __init__(
        self,
        path: str,
        *,
        empty: bool = False,
        postgres: bool = False,
        schema: str | None = None,
        backend: str = "sqlite",
    ) -> None:
        check = (
            "Check the path the ledger was opened with; it must be the SQLite file the graph's "
            "ledger uses."
        )
        if backend not in ("sqlite", "postgresql") and not postgres:
            what = f"{path!r} holds no langgraph-effects ledger (the {backend} backend found none set up)"
            advice = ": is it the right store?"
            check = "Check the URL the ledger was opened with."
            empty = True
        elif postgres:
            place = f"schema {schema!r}" if schema else "the search_path's schema"
            what = (
                f"the Postgres database {path} holds no langgraph-effects ledger in {place} (no "
                "effect_migrations table)"
            )
            advice = ": is it the right database (and schema)?"
            check = "Check the connection string and the schema the ledger was opened with."
        elif empty:
            what = (
                f"{path!r} is a SQLite database but holds no langgraph-effects ledger (no "
                "effect_migrations table)"
            )
            advice = ": is it the right file?"
        else:
            what, advice = f"no ledger database at {path!r}: the file does not exist", "."
        if postgres or empty:
            advice += " The ledger's tables are created by the graph's setup() (or the ledger's own setup())."
        self._record(
            f"{what}{advice} {check} Nothing was created or changed.",
            path=path, empty=empty or postgres, postgres=postgres, schema=schema, what=what,
            backend="postgresql" if postgres else backend,
        )


class UnresolvedOperationsError(TransitionError):
    """A thread's deletion was refused: some of its operations are not settled yet.

    Deleting them would lose the only record that a call may have reached the
    provider. Nothing was deleted.
    """

    kind = "unresolved_operations"

    thread_id: str
    op_ids: list[str]
    """The unresolved operations' ids (at most the first 20)."""

    def __init__(self, thread_id: str, ops: Sequence[Operation]) -> None:
        shown = [f"{op.op_id} ({op.state.value})" for op in ops[:20]]
        more = f" and {len(ops) - 20} more" if len(ops) > 20 else ""
        self._record(
            f"thread {thread_id!r} has {len(ops)} unresolved operation(s): {', '.join(shown)}{more}. "
            "Nothing was deleted. Settle them first (`langgraph-effects recover`, or a verdict with "
            "`langgraph-effects resolve`), or delete anyway with force=True (an operator's "
            "decision: the record that these calls may have reached the provider is lost).",
            thread_id=thread_id, op_ids=[op.op_id for op in ops[:20]],
        )


class LeaseLiveError(TransitionError):
    """The operation is ``dispatched`` under a live lease: someone is sending it right now."""

    kind = "lease_live"

    op_id: str
    owner: Owner | None
    lease_expires_at: float | None
    remaining: float | None
    """Seconds the lease still had to run when the verdict was refused."""
    what: str
    """The fact alone, without the advice (which the console words its own way)."""

    def __init__(self, op: Operation, *, now: float | None = None) -> None:
        stamp = time.time() if now is None else now
        who = "a worker"
        if op.owner is not None:
            who = f"pid {op.owner.pid} on {op.owner.host}"
        remaining = None
        if op.lease_expires_at is not None:
            remaining = max(0.0, op.lease_expires_at - stamp)
        left = f" for another {remaining:.0f}s" if remaining is not None else ""
        what = (
            f"operation {op.op_id} is being sent right now: dispatched by {who}, lease live"
            f"{left}. Nothing was changed."
        )
        self._record(
            f"{what} Wait until the worker finishes or its lease expires, then read it again.",
            op_id=op.op_id, owner=op.owner,
            lease_expires_at=op.lease_expires_at, remaining=remaining, what=what,
        )


class NotResolvableError(IllegalTransitionError):
    """The operation is in a state where an operator's verdict does not apply."""

    def __init__(self, op: Operation, event: Event) -> None:
        super().__init__(op.op_id, op.state.value, event.value)
        if op.terminal:
            why = f"it is already {op.state.value!r} (terminal): there is nothing left to decide"
        else:
            why = (
                f"it is {op.state.value!r}: nothing has been sent yet (the graph sends it on "
                "its next run), so nothing is in doubt"
            )
        self.args = (
            f"operation {op.op_id} cannot take the verdict {event.value!r}: {why}. Verdicts "
            "apply to operations in 'unknown' or 'review' (or 'dispatched' with an expired "
            "lease). Nothing was changed.",
        )


class VerdictNotRecordedError(TransitionError):
    """An expired lease was recorded as lost, but the verdict that followed was not.

    The operation is now ``unknown`` (`operation`, at a new version) and still
    waits for a verdict; `cause` says why the verdict was refused.
    """

    kind = "verdict_not_recorded"

    operation: Operation
    cause: Exception

    def __init__(self, operation: Operation, cause: Exception) -> None:
        self._record(
            f"{self.fact(operation, str(cause))} The operation still waits for a verdict: read "
            f"it again and resolve with expected_version={operation.version}.",
            operation=operation, cause=cause,
        )

    @staticmethod
    def fact(operation: Operation, cause: str) -> str:
        """What happened, with the refusal ``cause`` worded by the caller."""
        return (
            f"operation {operation.op_id}: its expired lease was recorded (dispatched -> "
            f"unknown, now version {operation.version}), but the verdict was NOT recorded: "
            f"{cause}."
        )
