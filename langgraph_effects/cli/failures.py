"""Errors on the console: exit codes, the message and the hint printed for each."""

from __future__ import annotations

import asyncio
import os
import shlex
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer
from rich.text import Text

from .. import errors
from ..core.exitcodes import ExitCode
from ..operator import ErrorDetailJSON, has_password, operation_to_json
from .render import print_json, stderr

if TYPE_CHECKING:
    from .target import Target

T = TypeVar("T")

EXIT_OK = int(ExitCode.OK)
EXIT_USAGE = int(ExitCode.USAGE)
EXIT_NOT_FOUND = int(ExitCode.NOT_FOUND)
EXIT_REFUSED = int(ExitCode.REFUSED)
EXIT_LEDGER = int(ExitCode.LEDGER)
EXIT_INTERNAL = int(ExitCode.INTERNAL)
EXIT_NEEDS_OPERATOR = int(ExitCode.NEEDS_OPERATOR)
EXIT_RESUME_FAILED = int(ExitCode.RESUME_FAILED)
EXIT_ALERT = int(ExitCode.ALERT)


class BadInput(ValueError):
    """A command line the console refuses (exit code 2), with what to do instead."""


# -- errors -------------------------------------------------------------------------


def exit_code_for(error: BaseException) -> int:
    """The documented exit code for an error raised by a command."""
    if isinstance(error, errors.VerdictNotRecordedError):
        return exit_code_for(error.cause) if isinstance(error.cause, errors.EffectsError) else EXIT_REFUSED
    if isinstance(error, errors.OperationNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(error, errors.TransitionError | errors.CompensationError):
        return EXIT_REFUSED
    if isinstance(error, errors.LedgerError):
        return EXIT_LEDGER
    if isinstance(error, errors.ReviewError | ValueError):
        return EXIT_USAGE
    if type(error).__module__.split(".", 1)[0] == "psycopg":
        return EXIT_LEDGER
    return EXIT_INTERNAL


def error_kind(error: BaseException) -> str:
    """The ``kind`` of the ``--json`` error output: the error's own, else by its type."""
    if isinstance(error, errors.EffectsError) and error.kind is not None:
        return error.kind
    if isinstance(error, ValueError):
        return "bad_input"
    return "ledger_unavailable" if exit_code_for(error) == EXIT_LEDGER else "internal"


def hint(error: BaseException, target: Target | None) -> str | None:
    """What to run next, as a command that works when pasted (it names ``--db``)."""
    if target is None:
        return None
    kind = error_kind(error)
    op_id = getattr(error, "op_id", None)
    if isinstance(error, errors.VerdictNotRecordedError):
        op_id = error.operation.op_id
    lines: list[str] = []
    if kind == "not_found":
        lines.append(
            f"List operations with `{target.command('list', '--all')}` (--all: resolved ones too)."
        )
    elif kind in ("stale_version", "lease_live", "verdict_not_recorded") and op_id:
        lines.append(f"Read it again: `{target.command('show', shlex.quote(op_id))}`.")
    elif kind == "ledger_not_found" and not os.path.isdir(target.db):
        lines.append(
            f"If this is the right database, create the ledger with `{target.command('setup')}`."
        )
    elif kind == "schema_behind":
        lines.append(f"Migrate it with `{target.command('setup')}`.")
    if lines and has_password(target.db):
        lines.append("(The password is not printed: give it through PGPASSWORD or ~/.pgpass.)")
    return "\n".join(lines) or None


def console_message(error: BaseException) -> str:
    """The message printed after ``error:``: the error's own words, with the console's advice.

    Library errors say what to do in API terms; where that advice is a console command
    or flag here, it is worded from the error's attributes.
    """
    if isinstance(error, errors.VerdictNotRecordedError):
        return (
            f"{error.fact(error.operation, console_message(error.cause))} The operation still "
            "waits for a verdict: show it again and resolve with --expected-version "
            f"{error.operation.version}."
        )
    if isinstance(error, errors.StaleVersionError):
        return f"{error.what} Read it again (`langgraph-effects show`) and decide on what it is now."
    if isinstance(error, errors.LeaseLiveError):
        return (
            f"{error.what} Wait until the worker finishes or its lease expires, then "
            "`langgraph-effects show` it again."
        )
    if isinstance(error, errors.SchemaBehindError):
        return (
            f"{error.what} migrate it first with `langgraph-effects --db ... setup` (or the "
            "graph's saver.setup()). Nothing was changed."
        )
    if isinstance(error, errors.LedgerNotFoundError):
        return _ledger_not_found(error)
    return str(error)


def _ledger_not_found(error: errors.LedgerNotFoundError) -> str:
    check = (
        "Check the path given with --db (or LANGGRAPH_EFFECTS_DB); it is the SQLite file the "
        "graph's ledger uses"
    )
    if error.postgres:
        advice = ": is it the right database (and --schema)?"
        check = "Check --db (or LANGGRAPH_EFFECTS_DB) and --schema"
    elif error.empty:
        advice = ": is it the right file?"
    else:
        advice = "."
    if error.empty:
        advice += (
            " The ledger's tables are created by the graph's setup() or "
            "`langgraph-effects --db ... setup`."
        )
    return f"{error.what}{advice} {check}. Nothing was created or changed."


def fail(error: BaseException, use_json: bool, target: Target | None = None) -> NoReturn:
    """Report ``error`` (stderr; and stdout as JSON with ``--json``) and exit."""
    code = exit_code_for(error)
    message = console_message(error) or type(error).__name__
    advice = hint(error, target)
    if use_json:
        print_json({"error": _json_error(error, message, code, advice)})
    console = stderr()
    console.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    if advice:
        console.print(Text(advice, style="dim"), soft_wrap=True)
    if code == EXIT_INTERNAL:
        console.print(
            Text(
                "".join(traceback.format_exception(type(error), error, error.__traceback__)),
                style="dim",
            )
        )
        console.print("This is a bug in langgraph-effects; please report it with the above.")
    raise typer.Exit(code)


def _json_error(error: BaseException, message: str, code: int, advice: str | None) -> ErrorDetailJSON:
    """The ``{"error": ...}`` object printed with ``--json`` (``ErrorJSON``)."""
    payload: ErrorDetailJSON = {
        "kind": error_kind(error),
        "type": type(error).__name__,
        "message": message,
        "exit_code": code,
    }
    if isinstance(error, errors.StaleVersionError):
        payload["expected_version"] = error.expected
        payload["actual_version"] = error.actual
    if isinstance(error, errors.VerdictNotRecordedError):
        payload["operation"] = operation_to_json(error.operation)
    if advice:
        payload["hint"] = advice
    return payload


def run(target: Target, work: Callable[[], Awaitable[T]]) -> T:
    """Run one command's async work, mapping errors to documented exit codes."""

    async def runner() -> T:
        return await work()

    try:
        return asyncio.run(runner())
    except Exception as error:  # mapped to a documented exit code (5 if unexpected)
        fail(error, target.json, target)

