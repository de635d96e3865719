"""``lab`` and ``crashtest``: argparse programs run under the console's name and exit codes."""

from __future__ import annotations

import typer

from .app import app
from .failures import EXIT_OK
from .render import print_argparse_help


@app.command(
    "lab",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def lab_command(ctx: typer.Context) -> None:
    """The crash lab: run crash experiments (`langgraph-effects lab --help` for its options)."""
    from ..lab import runner

    args = list(ctx.args)
    if ("--help" in args or "-h" in args) and hasattr(runner, "build_parser"):
        print_argparse_help(runner.build_parser(), "Usage: langgraph-effects lab [OPTIONS]")
        raise typer.Exit(EXIT_OK)
    code = runner.main(args)
    raise typer.Exit(int(code or 0))


@app.command(
    "crashtest",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def crashtest_command(ctx: typer.Context) -> None:
    """Crash-test your own graph (`langgraph-effects crashtest --help` for its options)."""
    from ..crashtest import cli as crashtest_cli

    raise typer.Exit(crashtest_cli.main(list(ctx.args)))
