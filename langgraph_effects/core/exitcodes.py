"""The exit codes of every ``langgraph-effects`` subcommand: one table, one meaning per code.

``list``, ``show``, ``resolve``, ``recover``, ``stats``, ``setup``, ``lab`` and ``crashtest`` all
use this table, so a script can branch on a code without knowing which command ran.
Codes a command cannot produce are simply never returned by it (``list`` never
finds a duplicated effect; ``lab`` never reads a ledger an operator named).

A module of its own (no imports) so the lab, the crash test and the console share it
without importing each other.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """A ``langgraph-effects`` exit code (stable, for scripts)."""

    OK = 0
    """Done: the command did what was asked (also: nothing to do)."""
    VIOLATED = 1
    """``lab`` / ``crashtest``: an effect was duplicated or lost (or left open)."""
    USAGE = 2
    """Usage or bad input: unknown option, missing ``--db``, malformed value."""
    REFUSED = 3
    """Refused, nothing written: stale ``--expected-version``, decision conflict, a state
    that takes no verdict, a live lease."""
    LEDGER = 4
    """Ledger unavailable: missing file, no ledger in that database, server unreachable
    or too slow to answer, locked, schema too new or not set up."""
    INTERNAL = 5
    """Could not run: an internal error (a bug), or a lab cell / crash-test run that
    could not be made."""
    NEEDS_OPERATOR = 6
    """``recover``: done, but something waits for a human."""
    RESUME_FAILED = 7
    """``recover``: resuming at least one thread raised (takes precedence over 6)."""
    NOT_FOUND = 8
    """No such operation in a ledger that could be read (or not in ``--tenant``)."""
    ALERT = 9
    """``stats``: read, and over a threshold it was given (a review waiting longer than
    ``--max-review-age``, an unresolved operation unchanged longer than
    ``--max-unresolved-age``)."""


#: ``(code, one line)`` for help texts and the README, in order.
TABLE: tuple[tuple[int, str], ...] = (
    (ExitCode.OK, "ok (also: nothing to do)"),
    (ExitCode.VIOLATED, "lab/crashtest: an effect was duplicated or lost"),
    (ExitCode.USAGE, "usage or bad input"),
    (ExitCode.REFUSED, "refused, nothing written (stale --expected-version, decision conflict, "
     "no verdict allowed in this state, live lease)"),
    (ExitCode.LEDGER, "ledger unavailable (missing file, no ledger there, unreachable or slow "
     "server, locked, not set up)"),
    (ExitCode.INTERNAL, "could not run (internal error, or a lab/crashtest run could not be made)"),
    (ExitCode.NEEDS_OPERATOR, "recover: done, but something waits for a human"),
    (ExitCode.RESUME_FAILED, "recover: resuming a thread raised"),
    (ExitCode.NOT_FOUND, "operation not found"),
    (ExitCode.ALERT, "stats: over a threshold (--max-review-age, --max-unresolved-age)"),
)

#: The table as one paragraph, for ``--help`` epilogs.
HELP = "Exit codes (every command): " + " · ".join(f"{int(code)} {text}" for code, text in TABLE) + "."

__all__ = ["HELP", "TABLE", "ExitCode"]
