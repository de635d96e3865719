"""``lab`` and ``crashtest``: argparse programs run under the console's name and exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import typer
from rich.text import Text

from .app import app
from .failures import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE
from .render import print_argparse_help, stderr

# -- lab ----------------------------------------------------------------------------


@app.command(
    "lab",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def lab_command(ctx: typer.Context) -> None:
    """The crash lab: run crash experiments (`langgraph-effects lab --help` for its options)."""
    try:
        from ..lab import runner
    except ImportError as error:
        stderr().print(Text(f"error: the crash lab is not available in this installation ({error})."))
        raise typer.Exit(EXIT_INTERNAL) from error
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


# -- shared by the argparse programs -----------------------------------------------------


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """``argv`` parsed, or the exit code when argparse already answered (``--help``, usage)."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_:  # argparse printed the help or its own usage error
        return int(exit_.code or 0)


def usage_error(parser: argparse.ArgumentParser, message: object) -> int:
    """Print the usage line and ``PROG: error: MESSAGE`` on stderr; the usage exit code."""
    parser.print_usage(sys.stderr)
    stderr().print(Text(f"{parser.prog}: error: {message}"))
    return EXIT_USAGE
