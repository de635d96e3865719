"""Every error the package raises survives pickle (a process pool, a LangGraph server
worker, a task queue): the same class, message and attributes come back, including
for the errors whose constructor takes other arguments than the message."""

from __future__ import annotations

import pickle

import pytest

from langgraph_effects import errors
from langgraph_effects.core.operation import Event
from langgraph_effects.errors import EffectsError

from .test_operator import make_op

OP = make_op("op-1")

BUILT_WITH_THEIR_OWN_ARGUMENTS: list[EffectsError] = [
    errors.InvalidOptionError("bad", owner="Effect", option="retries", given=-1, accepts="an int >= 0"),
    errors.MissingExtraError("Postgres", "psycopg", "postgres"),
    errors.TargetNotFoundError("pkg:make", "pkg", "make", None, "no module named pkg"),
    errors.SyncMismatchError("async saver in a sync run", used="AsyncX", use="X"),
    errors.UnknownBackendError("redis", "redis://h/0", ["sqlite", "postgresql"]),
    errors.UnsupportedByBackendError("memory", "a checkpointer"),
    errors.SchemaTooNewError(9, 5, "ledger.db"),
    errors.SchemaBehindError(3, 5, "ledger.db"),
    errors.NotSetUpError("EffectSqliteSaver", "ledger.db", "effect_operations", 5),
    errors.IllegalTransitionError("op-1", "LANDED", "DISPATCH"),
    errors.NotResolvableError(OP, Event.DISPATCH),
    errors.ApprovalError("op-1", "no approval"),
    errors.StaleVersionError("op-1", 3, 4),
    errors.DecisionConflictError("op-1", "d-1"),
    errors.OperationNotFoundError("op-1"),
    errors.ThreadConflictError("t-1", "", "c-1", "c-2"),
    errors.NondeterminismError("t-1", "main", 2, ("send", {"to": "a"}, "op-1"), ("send", {"to": "b"}), "c-1"),
    errors.NothingToResumeError("no review waits", thread_id="t-1", has_checkpoint=True),
    errors.CompensationError("op-1", "landed", "no undo"),
    errors.MalformedToolCallError("send", "", "no id"),
    errors.ControlRefusedError("send", "budget", "over"),
    errors.BudgetExceededError("send", "budget", "over"),
    errors.CircuitOpenError("send", "breaker", "open"),
    errors.OversizedError("receipt", 2_000_000, 1_000_000, "bytes", "store a reference"),
    errors.UnencodableValueError("key", "operation op-1", "a lone surrogate", "encode it first"),
    errors.DefiniteFailure("declined", details={"code": 402}),
    errors.LedgerNotFoundError("db.sqlite", empty=True),
    errors.UnresolvedOperationsError("t-1", [OP]),
    errors.LeaseLiveError(OP, now=0.0),
    errors.VerdictNotRecordedError(OP, TimeoutError("lease")),
]


def _error_classes() -> list[type[EffectsError]]:
    return [
        value for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, EffectsError)
    ]


def _takes_a_message(cls: type[EffectsError]) -> bool:
    return cls.__init__ is EffectsError.__init__


def test_every_error_with_its_own_constructor_is_checked_here() -> None:
    own = {cls for cls in _error_classes() if not _takes_a_message(cls)}
    checked = {type(error) for error in BUILT_WITH_THEIR_OWN_ARGUMENTS}
    missing = {cls.__name__ for cls in own if cls not in checked}
    assert not missing, f"add an instance of these to BUILT_WITH_THEIR_OWN_ARGUMENTS: {missing}"


@pytest.mark.parametrize(
    "error",
    BUILT_WITH_THEIR_OWN_ARGUMENTS
    + [cls("a message") for cls in _error_classes() if _takes_a_message(cls)],
    ids=lambda error: type(error).__name__,
)
def test_an_error_comes_back_from_pickle_as_it_was(error: EffectsError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert repr(vars(back)) == repr(vars(error))  # (exceptions in them compare by identity)
    assert getattr(back, "name", None) == getattr(error, "name", None)  # ImportError's, not in vars
    with pytest.raises(type(error)):
        raise back
