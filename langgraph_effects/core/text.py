"""Whether a value given to the package can be stored and hashed as it is. Pure.

A string holding a lone surrogate (``"x\\ud800"``: JSON from a model or a client can
carry one, and Python turns undecodable bytes of a command line into them) cannot be
encoded as UTF-8: hashing it into an id raises, Postgres refuses it in a checkpoint's
metadata, sqlite3 refuses it as a parameter, and LangGraph's checkpoint serializer
turns it into ``?`` (so what a resume reads back is another string). A receipt must be
JSON. The entry points that take ids, keys and an operator's verdict check their
values here and refuse a bad one with
`UnencodableValueError` before anything is sent or
written, naming the value and where in it the problem is.

Tool arguments are not checked: a surrogate in them is hashed the way the checkpoint
stores it (see `canonical_json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import UnencodableValueError

#: Nesting deeper than this is not walked (no answer or receipt is that deep).
_MAX_DEPTH = 64


def encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no unpaired surrogate): what UTF-8, a
    database and a checkpoint take as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(text: str) -> str:
    """``text`` quoted, short, and always printable (a surrogate as ``\\ud800``)."""
    escaped = text.encode("utf-8", "backslashreplace").decode()
    return repr(escaped if len(escaped) <= 60 else escaped[:57] + "...")


def require_text(value: str | None, field: str, advice: str) -> None:
    """Refuse ``value`` (named ``field``) unless it is valid text."""
    if value is not None and not encodable(value):
        raise UnencodableValueError(field, f"{field} ({shown(value)})", _SURROGATE, advice)


def require_json(value: Any, field: str, advice: str) -> None:
    """Refuse ``value`` (named ``field``) unless it is JSON made of valid text: strings
    (keys too) without a lone surrogate, numbers, booleans, ``None``, lists and mappings."""
    found = _problem(value, field, 0)
    if found is not None:
        where, why = found
        raise UnencodableValueError(field, where, why, advice)


_SURROGATE = "is not valid text (it holds an unpaired surrogate, which UTF-8 cannot encode)"


def _problem(value: Any, where: str, depth: int) -> tuple[str, str] | None:
    """(where, why) of the first part of ``value`` that is not JSON of valid text."""
    if isinstance(value, str):
        return None if encodable(value) else (f"{where} ({shown(value)})", _SURROGATE)
    if value is None or isinstance(value, bool | int | float) or depth > _MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"a key of {where} ({key!r})", "is not a string, which JSON needs"
            if not encodable(key):
                return f"a key of {where} ({shown(key)})", _SURROGATE
            found = _problem(item, f"{where}[{shown(key)}]", depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _problem(item, f"{where}[{i}]", depth + 1)
            if found is not None:
                return found
        return None
    return f"{where} ({type(value).__name__})", "is not a JSON value (a string, number, list or mapping)"


#: The run config's entries that ids, keys and checkpoints are made of.
CONFIG_IDS: tuple[str, ...] = ("thread_id", "checkpoint_ns", "checkpoint_id", "tenant_id", "policy_version")

#: What an error about such a config value advises.
CONFIG_ADVICE = (
    "Give it as valid text: decode bytes as UTF-8 (with errors='replace' if they may be "
    "malformed), or pass a digest of them."
)


def require_config_text(config: Mapping[str, Any]) -> None:
    """Refuse a run config whose thread id, checkpoint namespace or id, tenant id or
    policy version (`CONFIG_IDS`) is text that cannot be stored as it is."""
    conf = config.get("configurable") or {}
    for name in CONFIG_IDS:
        value = conf.get(name)
        if isinstance(value, str):
            require_text(value, f"config['configurable'][{name!r}]", CONFIG_ADVICE)


def require_metadata_text(metadata: Mapping[str, Any]) -> None:
    """Refuse checkpoint metadata holding text that cannot be stored as it is (LangGraph
    copies each string of ``config["configurable"]`` into it)."""
    for key, value in metadata.items():
        if isinstance(value, str):
            require_text(
                value,
                f"config['configurable'][{key!r}] (LangGraph copies it into the checkpoint's metadata)",
                CONFIG_ADVICE,
            )
