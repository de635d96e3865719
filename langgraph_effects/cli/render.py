"""Rendering shared by the commands: consoles, JSON, times, states (rich)."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.exitcodes import HELP as EXIT_CODES_HELP
from ..core.operation import Operation, State
from ..operator import LeaseStatus

STATE_STYLES: dict[State, str] = {
    State.PENDING: "cyan",
    State.DISPATCHED: "blue",
    State.UNKNOWN: "bold yellow",
    State.REVIEW: "bold magenta",
    State.CONFIRMED: "green",
    State.FAILED: "red",
    State.ABANDONED: "dim",
}

_LEASE_TEXT: dict[LeaseStatus, tuple[str, str]] = {
    "live": ("live", "blue"),
    "expired": ("expired", "bold yellow"),
    "owner_dead": ("owner dead", "bold yellow"),
}

# -- output helpers -------------------------------------------------------------------


def stdout(*, pipe_width: int = 240) -> Console:
    """The console on stdout: ``pipe_width`` columns into a file or pipe (unless $COLUMNS)."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, width=pipe_width if wide else None)


def stderr() -> Console:
    """The console on stderr: errors, hints and progress."""
    return Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _ago(seconds: float) -> str:
    """``42s``, ``5m``, ``2h 5m``, ``3d 4h``."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    minutes, s = divmod(s, 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def relative(ts: float, now: float) -> str:
    delta = now - ts
    return f"in {_ago(delta)}" if delta < 0 else f"{_ago(delta)} ago"


def when(ts: float | None, now: float) -> Text:
    if ts is None:
        return Text("-", style="dim")
    stamp = datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
    return Text.assemble(stamp, (f"  ({relative(ts, now)})", "dim"))


def compact(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def state_text(op: Operation, lease: LeaseStatus | None) -> Text:
    text = Text(op.state.value, style=STATE_STYLES[op.state])
    if lease is not None:
        label, style = _LEASE_TEXT[lease]
        text.append(f" ({label})", style=style)
    return text


def field(value: Any) -> Text:
    if value is None or value == "":
        return Text("-", style="dim")
    return Text(str(value))



def print_argparse_help(parser: Any, usage: str) -> None:
    """An argparse parser's help, laid out like the console's own (options panel, exit codes)."""
    console = stdout()
    console.print()
    console.print(Text(usage, style="bold"))
    console.print()
    if parser.description:
        console.print(Padding(Text(parser.description), (0, 1)))
        console.print()
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(style="yellow", no_wrap=True)
    table.add_column()
    for action in parser._actions:  # argparse keeps no public list of its options
        if not action.option_strings:
            continue
        metavar = ""
        if action.nargs != 0:
            metavar = str(action.metavar or action.dest.upper())
        text = str(action.help or "")
        if text and action.default not in (None, False) and "%(default)" in text:
            text = text % {"default": action.default}
        table.add_row(", ".join(action.option_strings), metavar, text)
    console.print(Panel(table, title="Options", title_align="left", border_style="dim"))
    console.print(Padding(Text(EXIT_CODES_HELP, style="dim"), (0, 1)))

