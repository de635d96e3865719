"""The provider key written into a tool argument (``Effect(key_argument=...)``).

Pure rules, no I/O: which argument carries the key, whether a tool's input schema has
it, and the arguments a call is sent with. The runtime calls `with_key` once per
send, after the operation is bound, so every send of one operation (the first, a
re-send by reconciliation, a resume after a crash) carries the same key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError
from .contract import Effect


def check_key_argument(tool: str, effect: Effect, arguments: Iterable[str]) -> None:
    """Refuse a contract whose ``key_argument`` the tool's input schema lacks.

    ``arguments`` are the names in the tool's model-visible input schema.
    Raises [`ConfigurationError`][langgraph_effects.errors.ConfigurationError].
    """
    name = effect.key_argument
    if name is None:
        return
    names = sorted(arguments)
    if name not in names:
        raise ConfigurationError(
            f"Effect(key_argument={name!r}) for tool {tool!r}: the tool's input schema has no "
            f"argument {name!r} (its arguments are {names}). Add that parameter to the tool "
            f"(a plain one with a default, e.g. `{name}: str = \"\"`: an InjectedToolArg "
            f"parameter is stripped by ToolNode before the tool runs), or name one it has, or "
            f"drop key_argument and read current_operation().provider_key inside the tool."
        )


def with_key(effect: Effect, args: Mapping[str, Any], provider_key: str) -> dict[str, Any]:
    """The arguments to send: ``args`` with the provider key in ``effect.key_argument``.

    Whatever the model put in that argument is replaced: the key is the operation's,
    never the model's, so a re-send cannot carry a different one.
    """
    sent = dict(args)
    if effect.key_argument is not None:
        sent[effect.key_argument] = provider_key
    return sent
