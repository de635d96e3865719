"""The operator console ``langgraph-effects``: find, inspect and resolve operations.

::

    langgraph-effects --db agent.db list                  # what is unresolved?
    langgraph-effects --db agent.db show OP               # everything needed to decide
    langgraph-effects --db agent.db resolve OP --landed --receipt '{"id": "r1"}' \\
        --expected-version 3                              # record a verdict
    langgraph-effects --db agent.db recover --graph myapp.agent:make_graph
                                                          # resume threads a crash left mid-effect
    langgraph-effects --db agent.db stats --max-review-age 1h
                                                          # health: exit 9 if a review waited > 1h
    langgraph-effects --db agent.db purge --older-than 90d --yes
                                                          # remove settled operations past retention
    langgraph-effects --db agent.db erase --tenant acme --yes
                                                          # erase a tenant's arguments and results
    langgraph-effects lab ...                             # the crash lab

``--db`` takes a SQLite file path or a Postgres DSN (``postgresql://...``, or libpq's
``host=... port=... dbname=...``); it defaults to ``$LANGGRAPH_EFFECTS_DB`` and may be
given before or after the command, like ``--schema`` (the ledger's Postgres schema) and
``--connect-timeout`` (seconds to wait for the server, or for SQLite's write lock;
default 5). ``--json`` prints machine-readable JSON on stdout (errors too, as
``{"error": {...}}``); human messages, errors and the line saying where the console
connects always go to stderr.

Reading never writes: ``list`` and ``show`` open the ledger read-only, and every
command refuses a database that holds no ledger (exit 4, nothing created). Tables are
created or migrated only by ``langgraph-effects setup`` (or the graph's ``setup()``).

A verdict is bound to the version you saw (``--expected-version``, printed by
``show``): if the operation changed since, it is refused and nothing is written.
Re-running ``resolve`` with the same ``--decision-id`` is safe (a no-op).

Exit codes: one table for every subcommand (``lab`` and ``crashtest`` included), see
`langgraph_effects.core.exitcodes`:

====  ==========================================================================
0     ok (also: nothing to do)
1     ``lab``/``crashtest``: an effect was duplicated or lost
2     usage or bad input: unknown option, missing ``--db``, two verdict flags,
      ``--receipt`` that is not JSON or too big, ``--reason`` missing for ``--abandon``
3     refused, nothing written: stale ``--expected-version``, decision id reused
      with other content, a state that takes no verdict (already resolved,
      pending), or a live lease (someone is sending it right now)
4     ledger unavailable: the ``--db`` file does not exist (never created for
      you), the database holds no ledger (or one at another schema version), is
      locked, or the Postgres server is unreachable or does not answer in time
5     could not run: an internal error (a bug in langgraph-effects: please report
      it), or a lab/crashtest run that could not be made
6     ``recover`` only: done, but something waits for a human (an operation awaits
      an operator's verdict or approval, a thread is paused at another interrupt,
      or unresolved operations sit in a thread with no pending work)
7     ``recover`` only: resuming at least one thread raised (see its ``error``);
      takes precedence over 6
8     not found: no such operation in this ledger (or not in ``--tenant``)
9     ``stats`` only: read, and over a threshold it was given (a review or approval
      waiting longer than ``--max-review-age``, an unresolved operation unchanged
      longer than ``--max-unresolved-age``)
====  ==========================================================================

A missing SQLite file exits with 4, not 8, so that 8 always means "the ledger was
read and has no such operation".

The package, one concern a module: ``app`` (the typer app and the options every
command shares), ``target`` (which ledger ``--db``/``--schema`` name, and opening it
or its checkpointer), ``failures`` (exit codes, error messages and hints),
``render`` (rich output shared by the commands), ``graphs`` (importing ``--graph``),
one module per command group (``listing``: list and show; ``resolve``; ``setup``;
``recover``; ``controls``: budgets and circuit breakers; ``stats``: the ledger's
health; ``lifecycle``: purge, erase and deletions; ``passthrough``: lab and
crashtest; ``mcptools``: mcp-tools), and ``main`` (the entry point).
"""

from __future__ import annotations

# Importing a command module registers its commands on ``app``; ``--help`` lists them in
# this order.
from . import listing  # list, show

# isort: split
from . import resolve

# isort: split
from . import compensate  # compensate, compensations

# isort: split
from . import setup

# isort: split
from . import recover

# isort: split
from . import controls  # budgets and circuit breakers

# isort: split
from . import (
    lifecycle,  # purge, erase, deletions
    stats,  # the ledger's health
)

# isort: split
from . import passthrough  # lab, crashtest

# isort: split
from . import mcptools  # mcp-tools
from .app import app
from .main import main

__all__ = [
    "app",
    "compensate",
    "controls",
    "lifecycle",
    "listing",
    "main",
    "mcptools",
    "passthrough",
    "recover",
    "resolve",
    "setup",
    "stats",
]
