"""What the property tests share: hypothesis settings and junk strategies, tools over
providers that keep their own records, and a reader of every operation in a ledger."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from langchain_core.tools import BaseTool, tool

from langgraph_effects import (
    DefiniteFailure,
    Effect,
    Ledger,
    Operation,
    OperationQuery,
    State,
    current_operation,
)
from langgraph_effects.lab.providers import Provider

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EFFECTFUL = ("send", "notify")
HUGE = 200_000
ALL_STATES = frozenset(State)


# -- tools over providers that keep their own records ------------------------------------


def _behave(fail: str, apply: Callable[[], str]) -> str:
    """``fail`` decides what the first attempt does; later attempts always succeed."""
    first = current_operation().attempt == 1
    if fail == "definite":
        raise DefiniteFailure("the provider rejected the request (422)")
    if fail == "error_before" and first:
        raise ConnectionError("connection reset before the request was sent")
    receipt = apply()
    if fail == "timeout_after" and first:
        raise TimeoutError("the provider did not answer in time")
    return receipt


def make_tools(dedup: Provider, blind: Provider) -> list[BaseTool]:
    @tool
    def send(label: str, body: str = "", fail: str = "none") -> str:
        """Send ``label`` through a provider that dedups on our key."""
        key = current_operation().provider_key
        return _behave(fail, lambda: dedup.apply({"operation": label}, key=key).effect_id)

    @tool
    def notify(label: str, body: str = "", fail: str = "none") -> str:
        """Notify ``label`` through a provider that neither dedups nor can be queried."""
        return _behave(fail, lambda: blind.apply({"operation": label}).effect_id)

    @tool
    def peek(q: str) -> str:
        """Read something; changes nothing."""
        return f"seen {q[:20]}"

    return [send, notify, peek]


EFFECTS = {"send": Effect(dedup_window=3600), "peek": Effect.read_only()}  # notify: blind


# -- generated calls -------------------------------------------------------------------

# Integers stay within 64 bits: LangGraph's checkpoint serializer (msgpack) cannot store
# larger ones at all, so such a message never reaches the tools.
INTS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
JUNK = st.recursive(
    st.none()
    | st.booleans()
    | INTS
    | st.floats()
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
SCALAR_NOT_STR = st.none() | st.booleans() | INTS | st.floats()
NOT_A_STRING = (
    SCALAR_NOT_STR | st.lists(JUNK, max_size=3) | st.dictionaries(st.text(max_size=6), JUNK, max_size=3)
)
NOT_A_DICT = SCALAR_NOT_STR | st.text(max_size=12) | st.lists(JUNK, max_size=3)  # "not json" strings too



async def all_ops(ledger: Ledger) -> list[Operation]:
    return await ledger.list_operations(OperationQuery(states=ALL_STATES, limit=10_000))
