"""A session's two central types: its `Settings` (the node-level options every session
of an integration shares, each checked when given) and the `CallRecord` it keeps per
call (the operation the call is bound to, and its dispatch's lease and heartbeat)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import identity, options
from ..core.contract import BLIND, Effect
from ..core.controls import Refusal
from ..core.operation import Operation, Owner
from ..errors import InvalidOptionError
from ..ledger.base import Ledger
from .lease import DEFAULT_LEASE_SECONDS

if TYPE_CHECKING:
    from .heartbeat import Heartbeat


@dataclass(frozen=True)
class Settings:
    """Node-level options shared by every session."""

    effects: Mapping[str, Effect]
    hash_key: bytes | None = None
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    durable_wait_seconds: float = 30.0
    detect_replans: bool = True

    def effect_for(self, tool: str) -> Effect:
        return self.effects.get(tool, BLIND)

    @classmethod
    def build(
        cls,
        effects: Mapping[str, Effect] | None,
        *,
        hash_key: bytes | None,
        lease_seconds: float,
        detect_replans: bool = True,
        owner: str = "EffectToolNode",
    ) -> Settings:
        """Settings from a node's or middleware's keyword arguments (env for the hash key),
        each checked (``owner`` names the integration in the error)."""
        check_effects(owner, effects)
        options.check(owner, "hash_key", hash_key, options.optional(options.secret()))
        options.check(owner, "lease_seconds", lease_seconds, LEASE_SECONDS)
        options.check(owner, "detect_replans", detect_replans, options.flag())
        return cls(
            effects=dict(effects or {}),
            hash_key=hash_key if hash_key is not None else identity.hash_key_from_env(),
            lease_seconds=lease_seconds,
            detect_replans=detect_replans,
        )


LEASE_SECONDS = options.Accepts(
    "a number of seconds (above 0)",
    lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf"),
    lambda v: "Write seconds: timedelta(minutes=5).total_seconds(), or 300." if not isinstance(
        v, int | float) else None,
)
"""What an integration's ``lease_seconds`` accepts."""

_EFFECTS = options.Accepts("a mapping of tool name -> Effect", lambda v: v is None or isinstance(v, Mapping))


def check_effects(owner: str, effects: Any) -> None:
    """Refuse an ``effects=`` that is not a mapping of names to `Effect` objects."""
    options.check(owner, "effects", effects, _EFFECTS)
    for key, effect in (effects or {}).items():
        if not isinstance(key, str) or not key:
            raise options.refuse(owner, "effects", key, _EFFECTS, "Its keys are tool names (str).")
        if not isinstance(effect, Effect):
            hint = "Call it: Effect(...)." if effect is Effect else "Declare it with Effect(...)."
            raise InvalidOptionError(
                f"{owner}(effects={{{key!r}: {options.written(effect)}}}): the contract of {key!r} "
                f"must be an Effect, not {options.shown(effect)}. {hint}",
                owner=owner, option="effects", given=effect, accepts="an Effect per tool name",
            )


_LEDGER = options.Accepts(
    "a Ledger (SqliteLedger, PostgresLedger...), or None for the checkpointer's",
    lambda v: v is None or isinstance(v, Ledger),
    lambda v: (
        "A saver is the graph's checkpointer: pass it to compile()/create_agent(checkpointer=...) and "
        "its ledger is found there (or pass its .ledger)." if hasattr(v, "ledger") else None
    ),
)


def check_ledger(owner: str, ledger: Any) -> None:
    """Refuse a ``ledger=`` that is not a `Ledger`."""
    options.check(owner, "ledger", ledger, _LEDGER)


@dataclass
class CallRecord:
    """What a session knows of one of its calls: the operation it is bound to, and the
    lease and heartbeat of its dispatch while it has one."""

    call_id: str
    tool: str
    args: dict[str, Any]
    effect: Effect
    op: Operation
    owner: Owner | None = None
    heartbeat: Heartbeat | None = None
    running: bool = False
    """Between the dispatcher answering ``RunTool`` and the outcome being recorded: the
    tool may be on the wire, so its lease is kept until then."""
    conflict: str | None = None
    batch_token: str | None = None
    edited: bool = False
    refusal: Refusal | None = None
    """Why a budget or circuit breaker refused its last send (``None``: it did not)."""
    trace: Any = None
    """What `telemetry` tells of the call's current round (a ``CallTrace``), if anything."""
