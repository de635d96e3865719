"""Options checked when they are made: one mechanism for every declaration.

Each option of `Effect`, ``Budget``, ``CircuitBreaker``,
``Undo`` and of the integrations is described by an `Accepts` (a test and the
words for what passes it). `check` refuses a value that fails, and
`checked_options` refuses a keyword no option has, both with an
`InvalidOptionError` that names the option, what was
given and what is accepted. A wrong option therefore fails where it is written, not
after a crash, inside reconciliation, when the thread can no longer move on.

`check_tool_names` is the one check of an ``effects`` map against the tools an
integration runs: a name that is no tool is refused, with the nearest tool name.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from ..errors import InvalidOptionError

T = TypeVar("T")
"""The class `checked_options` returns, unchanged in type."""


@dataclass(frozen=True)
class Accepts:
    """What an option accepts: ``test`` decides, ``words`` says it to a human."""

    words: str
    test: Callable[[Any], bool]
    hint: Callable[[Any], str | None] = lambda _: None
    """Advice for a value that fails (e.g. how to write ``"24h"``), or ``None``."""


def written(value: Any, limit: int = 80) -> str:
    """A value as it was written: a class or function by its name, else its repr, cut to
    ``limit``."""
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return str(value.__qualname__)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: Any) -> str:
    """A value as an error shows it: what it is and how it was written."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    return f"the {type(value).__name__} {written(value)}"


def refuse(
    owner: str, option: str, value: Any, accepts: Accepts, hint: str | None = None
) -> InvalidOptionError:
    """The error for ``owner(option=value)``."""
    advice = hint if hint is not None else accepts.hint(value)
    message = f"{owner}({option}={written(value)}): {option} takes {accepts.words}, not {shown(value)}."
    if advice:
        message += f" {advice}"
    return InvalidOptionError(message, owner=owner, option=option, given=value, accepts=accepts.words)


def check(owner: str, option: str, value: Any, accepts: Accepts) -> None:
    """Refuse ``value`` for ``owner``'s ``option`` unless ``accepts`` takes it."""
    if not accepts.test(value):
        raise refuse(owner, option, value, accepts)


def check_all(owner: str, obj: object, options: Mapping[str, Accepts]) -> None:
    """`check` every option of ``obj`` listed in ``options``, in that order."""
    for option, accepts in options.items():
        check(owner, option, getattr(obj, option), accepts)


def nearest(name: str, names: Iterable[str]) -> str | None:
    """The closest of ``names`` to a misspelled ``name`` (``None``: nothing close)."""
    found = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` when one of ``names`` is close to ``name``, else ``""``."""
    found = nearest(name, names)
    return f" Did you mean {found!r}?" if found is not None else ""


# -- what options accept -------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_SPOKEN = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*"
    r"(s|sec|secs|seconds?|m|min|mins|minutes?|h|hr|hrs|hours?|d|days?|w|weeks?)\s*$"
)


def _duration_hint(value: Any) -> str | None:
    """How to write a duration given as text (``"24h"`` -> ``timedelta(hours=24)``)."""
    if isinstance(value, str):
        spoken = _SPOKEN.match(value.lower())
        if spoken is not None:
            amount, unit = spoken.group(1), _UNITS[spoken.group(2)[0]]
            seconds = float(amount) * {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400,
                                       "weeks": 604800}[unit]
            return f"Write timedelta({unit}={amount}) (or {seconds:g} seconds)."
        return "Write a timedelta (timedelta(hours=24)) or a number of seconds (86400)."
    return None


def duration(*, positive: bool = False) -> Accepts:
    """A ``timedelta`` or a number of seconds (0 or more; above 0 if ``positive``)."""
    least = "above 0" if positive else "of 0 or more"

    def test(value: Any) -> bool:
        if isinstance(value, timedelta):
            seconds = value.total_seconds()
        elif _is_number(value):
            seconds = float(value)
        else:
            return False
        return seconds > 0 if positive else seconds >= 0

    return Accepts(f"a timedelta or a number of seconds ({least})", test, _duration_hint)


def whole(least: int) -> Accepts:
    """A whole number of at least ``least``."""
    return Accepts(
        f"a whole number of at least {least}",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= least,
        lambda v: f"Write a number such as {max(least, 1)}." if isinstance(v, str) else None,
    )


def amount() -> Accepts:
    """A number of 0 or more."""
    return Accepts("a number of 0 or more", lambda v: _is_number(v) and v >= 0)


def name() -> Accepts:
    """A non-empty string."""
    return Accepts("a non-empty name (a str)", lambda v: isinstance(v, str) and bool(v.strip()))


def names() -> Accepts:
    """A list or tuple of names (a lone string is refused: it is not a list of its letters)."""
    def hint(value: Any) -> str | None:
        return f"A single name goes in a tuple: ({value!r},)." if isinstance(value, str) else None

    return Accepts(
        "a list or tuple of names (str)",
        lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) and x for x in v),
        hint,
    )


def one_of(*values: str) -> Accepts:
    """One of ``values`` (a misspelling is told the nearest)."""
    quoted = [repr(v) for v in values]
    words = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return Accepts(
        words,
        lambda v: isinstance(v, str) and v in values,
        lambda v: did_you_mean(v, values).strip() or None if isinstance(v, str) else None,
    )


def flag() -> Accepts:
    """``True`` or ``False``."""
    return Accepts("True or False", lambda v: isinstance(v, bool))


def function(words: str) -> Accepts:
    """Anything callable, described as ``words``."""
    return Accepts(words, callable)


def instance(kind: type, words: str) -> Accepts:
    """An instance of ``kind``."""
    return Accepts(words, lambda v: isinstance(v, kind))


def secret() -> Accepts:
    """Bytes (a hash key)."""
    return Accepts("bytes (a secret key)", lambda v: isinstance(v, bytes) and bool(v),
                   lambda v: "Encode it: key.encode()." if isinstance(v, str) else None)


def each(inner: Accepts, words: str) -> Accepts:
    """A list or tuple whose every item ``inner`` accepts."""
    return Accepts(words, lambda v: isinstance(v, list | tuple) and all(inner.test(x) for x in v))


def exception_types() -> Accepts:
    """A list or tuple of exception classes."""
    def hint(value: Any) -> str | None:
        if isinstance(value, type) and issubclass(value, BaseException):
            return f"A single one goes in a tuple: ({value.__name__},)."
        return "Give the classes, not instances: (ValueError,), not (ValueError(),)." if isinstance(
            value, list | tuple) and any(isinstance(x, BaseException) for x in value) else None

    return Accepts(
        "a list or tuple of exception classes",
        lambda v: isinstance(v, list | tuple)
        and all(isinstance(x, type) and issubclass(x, BaseException) for x in v),
        hint,
    )


def optional(inner: Accepts) -> Accepts:
    """``None`` or what ``inner`` accepts."""
    return Accepts(f"{inner.words}, or None", lambda v: v is None or inner.test(v), inner.hint)


def either(first: Accepts, second: Accepts) -> Accepts:
    """What ``first`` or ``second`` accepts."""
    return Accepts(
        f"{first.words} or {second.words}",
        lambda v: first.test(v) or second.test(v),
        lambda v: first.hint(v) or second.hint(v),
    )


# -- option names ----------------------------------------------------------------------


def checked_options(cls: type[T]) -> type[T]:
    """Refuse, on a dataclass, a keyword that names none of its options (with the
    nearest one), before its generated ``__init__`` raises a bare ``TypeError``."""
    init = cls.__init__
    known = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    owner = cls.__name__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for given in kwargs:
            if given not in known:
                raise InvalidOptionError(
                    f"{owner}() has no option {given!r}.{did_you_mean(given, known)} Its options: "
                    f"{', '.join(known)}.",
                    owner=owner, option=given, given=kwargs[given], accepts=", ".join(known),
                )
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


def check_tool_names(owner: str, effects: Mapping[str, Any], tools: Sequence[str], *, where: str) -> None:
    """Refuse an ``effects`` key that names none of ``tools`` (what the integration runs).

    A misspelled key leaves the real tool undeclared, so blind: reviewed where its
    contract would have settled it, or recorded where it was meant to be read-only.
    ``where`` says whose tools they are (``"this node"``, ``"this agent"``).
    """
    for key in effects:
        if key in tools:
            continue
        listed = ", ".join(sorted(tools)) or "none"
        raise InvalidOptionError(
            f"{owner}(effects={{{key!r}: ...}}): {key!r} names no tool of {where}."
            f"{did_you_mean(key, tools)} Its tools: {listed}. A tool left out of effects= is a "
            "blind effect (every lost answer goes to review): fix the name so its contract applies. "
            "Nothing was sent.",
            owner=owner, option="effects", given=key, accepts=f"the name of a tool of {where}",
        )
