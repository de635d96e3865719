"""Parsing an argparse program's arguments (``crashtest``) and reporting a usage error
with the console's exit code. The lab parses its own (``lab/runner.py``): its usage
errors print as argparse words them, unwrapped."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.text import Text

from .failures import EXIT_USAGE
from .render import stderr


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
