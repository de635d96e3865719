"""The entry point: runs the ``typer`` app and maps click's usage errors to exit code 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any, cast

import typer
from rich.text import Text

from .app import app
from .failures import EXIT_OK, EXIT_USAGE
from .render import stderr

# -- entry point ----------------------------------------------------------------------


def _click_exception_types() -> tuple[type[Exception], type[Exception]]:
    """Click's ClickException and UsageError (vendored by typer >= 0.26, click before)."""
    mro = typer.BadParameter.__mro__
    usage = next(c for c in mro if c.__name__ == "UsageError")
    base = next(c for c in mro if c.__name__ == "ClickException")
    return cast(type[Exception], base), cast(type[Exception], usage)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the console; returns the exit code (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    # The pool's own retry warnings would bury our one-line error (which names the cause).
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    command = typer.main.get_command(app)
    click_error, usage_error = _click_exception_types()
    # A model can put unpaired surrogates in arguments: print them escaped, never crash.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="backslashreplace")
    try:
        result = command.main(args=args or ["--help"], prog_name="langgraph-effects", standalone_mode=False)
    except usage_error as error:
        _show_click_error(error)
        return EXIT_USAGE
    except click_error as error:
        _show_click_error(error)
        return EXIT_USAGE
    except (typer.Abort, KeyboardInterrupt):
        stderr().print("Aborted.")
        return 130
    if not args:
        return EXIT_USAGE
    return result if isinstance(result, int) else EXIT_OK


def _show_click_error(error: Exception) -> None:
    try:
        from typer import rich_utils

        rich_utils.rich_format_error(cast(Any, error))
    except Exception:
        show = getattr(error, "show", None)
        if callable(show):
            show()
        else:
            stderr().print(Text(f"error: {error}"))
