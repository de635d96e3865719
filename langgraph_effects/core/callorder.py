"""Functional API call order: bind a task call by what it is, and catch LangGraph's
positional cache handing one call's result to another. Pure.

LangGraph 1.2 names a Functional API task call by its place: the task id is derived
from the checkpoint, the task's name and the call's index among its parent's calls,
never from its arguments. On a resume it hands the saved result of call *i* to
whatever is called *i*-th, without running it. An entrypoint whose order changes
between runs (``for r in set(...)``, a list read inside it) is then answered with
other calls' results, and a call that moved into a place answered from the cache is
never run at all.

So ``@effectful`` binds a call to its operation by what it is: its parent, tool,
argument hash and how many equal calls came before it in this run (its
`occurrence`), not by its index; a call that moved finds its own operation
wherever it now sits. And each call leaves a `MARK` write beside its result
naming what was recorded there; a later effectful call of the run compares each
earlier place's mark with what was called there now (`crossed`) and stops the
run before anything else leaves when LangGraph answered a call with another's result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The channel of the write each ``@effectful`` call leaves beside its result. No
#: such channel exists in an entrypoint, so LangGraph stores the write with the
#: task's writes (and gives it back with them on a resume) but applies it to nothing.
MARK = "__effects_call__"


@dataclass(frozen=True)
class Placed:
    """One task call of this run at its place among its parent's calls."""

    index: int
    tool: str | None
    """The operation's tool name, ``None`` for a task that is not ``@effectful``."""
    args_hash: str | None
    recorded: Mapping[str, Any] | None = None
    """The `MARK` found in its writes: what the run that saved them called here."""
    args: Mapping[str, Any] | None = None
    """Its arguments as bound (secret fields redacted), for an error to name."""


@dataclass(frozen=True)
class Crossing:
    """A place whose saved result belongs to another call than the one made there now."""

    index: int
    recorded_tool: str
    recorded_op_id: str | None
    called_tool: str | None
    called_args: Mapping[str, Any] | None


def mark(tool: str, args_hash: str, op_id: str) -> dict[str, str]:
    """The `MARK` write of one call."""
    return {"tool": tool, "args_hash": args_hash, "op_id": op_id}


def recorded_mark(writes: Iterable[tuple[str, Any]]) -> Mapping[str, Any] | None:
    """The `MARK` among a task's writes, if it has a well-formed one."""
    for channel, value in writes:
        if channel == MARK and isinstance(value, Mapping) and "tool" in value and "args_hash" in value:
            return value
    return None


def crossed(placed: Sequence[Placed]) -> Crossing | None:
    """The first place (by index) whose recorded call is not the call made there now.

    Only a place with a mark can tell: its writes were saved by a run that called
    ``recorded`` there. In this run, LangGraph answered whatever sits there now with
    that result; when it is another call (another tool, other arguments, or a task
    that is not effectful), that call was never run and its caller got a wrong result.
    """
    for p in sorted(placed, key=lambda p: p.index):
        if p.recorded is None:
            continue
        tool, digest = str(p.recorded["tool"]), str(p.recorded["args_hash"])
        if (p.tool, p.args_hash) != (tool, digest):
            op_id = p.recorded.get("op_id")
            return Crossing(
                index=p.index,
                recorded_tool=tool,
                recorded_op_id=str(op_id) if op_id is not None else None,
                called_tool=p.tool,
                called_args=p.args,
            )
    return None


def occurrence(index: int, tool: str, args_hash: str, placed: Iterable[Placed]) -> int:
    """How many calls equal to this one (same tool, same argument hash) its parent made
    before it in this run: what tells two equal calls apart without their places."""
    return sum(1 for p in placed if p.index < index and (p.tool, p.args_hash) == (tool, args_hash))


def call_key(parent: str, tool: str, nth: int) -> str:
    """The key that tells a Functional API call apart within its turn (see
    `langgraph_effects.core.identity.operation_id`, which adds the argument hash)."""
    return f"{parent}:{tool}#{nth}"
