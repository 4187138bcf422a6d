"""The telemetry options every long-running role takes, and the block its trio run goes in."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from aether.telemetry import Telemetry, add_telemetry_arguments, telemetry_config, telemetry_running

__all__ = ["add_telemetry_arguments", "running_telemetry"]


@contextlib.contextmanager
def running_telemetry(arguments: argparse.Namespace, *, role: str) -> Iterator[Telemetry]:
    """Run the block with the telemetry `arguments` ask for (`aether-<role>`); refuse a bad combination at start.

    Raises:
        SystemExit: 2, after printing why, when the options do not go together.
    """
    try:
        config = telemetry_config(arguments, service_name=f"aether-{role}")
    except ValueError as error:
        print(f"aether {role}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    with telemetry_running(config) as telemetry:
        yield telemetry
