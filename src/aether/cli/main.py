"""`aether`: the root of the command line; each role or tool adds its subcommands here.

Only the command being run imports its module (`aether.cli.commands`): `aether --help` imports no role.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence

from aether.cli.commands import COMMANDS

EXIT_FAILED = 1
"""The command ran and found a problem (a damaged log, an undecodable record)."""


def build_parser(*, full: Collection[str] | None = None) -> argparse.ArgumentParser:
    """Return the parser of the command line: the commands named in `full` (None: every one) with their options,
    the others by name and summary only (enough for `aether --help` and for choosing one)."""
    parser = argparse.ArgumentParser(
        prog="aether", description="Aether: an event-sourced service-mesh control plane."
    )
    roles = parser.add_subparsers(dest="role", required=True, metavar="COMMAND")
    for command in COMMANDS:
        if full is None or command.name in full:
            importlib.import_module(command.module).add_parser(roles)
        else:
            roles.add_parser(command.name, help=command.summary)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command `argv` runs: its first word (the root parser has no option taking a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _reported(error: Exception) -> bool:
    """Print `error` if it is one the commands report as a finding (a damaged log, an undecodable record)."""
    from aether.core.errors import CoreError
    from aether.log import LogError

    if not isinstance(error, LogError | CoreError):
        return False
    print(f"aether: error: {error}", file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 a problem found, 2 a usage error)."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(full={name} if (name := _command_named(words)) else ())
    arguments = parser.parse_args(words)
    try:
        status: int = arguments.run(arguments)
    except BrokenPipeError:  # `aether log inspect DIR | head` is a normal use
        return 0
    except Exception as error:
        if not _reported(error):
            raise
        return EXIT_FAILED
    return status
