"""What the engine hands its callers: node options, the action a call takes next, and
the per-call record a session keeps (see ``docs/architecture.md``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import identity
from ..core.contract import BLIND, Effect
from ..core.operation import Operation, Owner
from . import lease
from .context import OperationInfo
from .heartbeat import Heartbeat


@dataclass(frozen=True)
class Settings:
    """Node-level options shared by every session."""

    effects: Mapping[str, Effect]
    hash_key: bytes | None = None
    lease_seconds: float = lease.DEFAULT_LEASE_SECONDS
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
    ) -> Settings:
        """Settings from a node's or middleware's keyword arguments (env for the hash key)."""
        return cls(
            effects=dict(effects or {}),
            hash_key=hash_key if hash_key is not None else identity.hash_key_from_env(),
            lease_seconds=lease_seconds,
            detect_replans=detect_replans,
        )


# -- what a call should do next ------------------------------------------------------


@dataclass(frozen=True)
class Execute:
    """Run the tool now, under this operation's lease."""

    info: OperationInfo


@dataclass(frozen=True)
class Answer:
    """The call is settled for now: nothing is sent. It returns ``output`` (a recorded
    outcome, or the placeholder of a call that waits for a human), or raises ``error``
    (the tool's own exception, recorded, as ToolNode would propagate it)."""

    output: Any = None
    error: BaseException | None = None


Action = Answer | Execute


@dataclass
class _Call:
    call_id: str
    tool: str
    args: dict[str, Any]
    effect: Effect
    op: Operation
    owner: Owner | None = None
    heartbeat: Heartbeat | asyncio.Task[None] | None = None
    running: bool = False
    """Between :meth:`Session.begin` answering ``Execute`` and the outcome being
    recorded: the tool may be on the wire, so its lease is kept until then."""
    conflict: str | None = None
    batch_token: str | None = None
    edited: bool = False


def by_id(ops: Iterable[Operation]) -> dict[str, Operation]:
    """Operations keyed by id (what ``Ledger.record_intents`` returns, looked up)."""
    return {op.op_id: op for op in ops}
