"""`aether`: the root of the command line; each role or tool adds its subcommands here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from aether.cli import (
    agent_command,
    demo_command,
    dns_command,
    edge_command,
    log_commands,
    registrar_command,
    render_command,
    status_command,
)
from aether.core.errors import CoreError
from aether.log import LogError

EXIT_FAILED = 1
"""The command ran and found a problem (a damaged log, an undecodable record)."""


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the whole command line."""
    parser = argparse.ArgumentParser(
        prog="aether", description="Aether: an event-sourced service-mesh control plane."
    )
    roles = parser.add_subparsers(dest="role", required=True, metavar="COMMAND")
    agent_command.add_parser(roles)
    demo_command.add_parser(roles)
    dns_command.add_parser(roles)
    registrar_command.add_parser(roles)
    log_commands.add_parser(roles)
    status_command.add_parser(roles)
    render_command.add_parser(roles)
    edge_command.add_parser(roles)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 a problem found, 2 a usage error)."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    try:
        status: int = arguments.run(arguments)
    except (LogError, CoreError) as exc:
        print(f"aether: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:  # `aether log inspect DIR | head` is a normal use
        return 0
    return status
