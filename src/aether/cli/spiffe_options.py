"""The command-line options choosing where a role's identities come from: SPIFFE's Workload API and Broker API.

`--svid-dir` (files, `aether.cli.common`) is the third source. The sockets default from the environment variables
the SPIFFE specs name: `SPIFFE_ENDPOINT_SOCKET` (Workload Endpoint) and `SPIFFE_BROKER_SOCKET` (Broker Endpoint).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aether.identity.broker import BROKER_SOCKET_ENV
from aether.identity.workload_api import ENDPOINT_SOCKET_ENV, endpoint_socket_from_env

__all__ = ["add_spiffe_arguments", "spiffe_sockets"]


def add_spiffe_arguments(parser: argparse.ArgumentParser, *, broker: bool = True) -> None:
    """Add `--spiffe-workload-socket` (and, with `broker`, `--spiffe-broker-socket`) to `parser`."""
    parser.add_argument(
        "--spiffe-workload-socket",
        type=Path,
        metavar="PATH",
        help="this role's own SVID and the trust bundles from the SPIFFE Workload API at this Unix socket"
        f" (default: ${ENDPOINT_SOCKET_ENV})",
    )
    if broker:
        parser.add_argument(
            "--registrar-spiffe",
            action="store_true",
            help="mTLS to the registrar with the Workload API's SVID (rotated without a restart), instead of the"
            " --registrar-cert/-key/-bundle files",
        )
        parser.add_argument(
            "--spiffe-broker-socket",
            type=Path,
            metavar="PATH",
            help="broker every pod's SVID from the SPIFFE Broker API at this Unix socket, over mTLS with the"
            f" Workload API's SVID (default: ${BROKER_SOCKET_ENV})",
        )


def spiffe_sockets(arguments: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """Return the Workload API and Broker API sockets the options (or the environment) name.

    Raises:
        ValueError: An environment variable names no Unix socket, or a broker is given without a Workload API.
    """
    workload = arguments.spiffe_workload_socket or endpoint_socket_from_env()
    broker = getattr(arguments, "spiffe_broker_socket", None)
    if broker is None:
        broker = endpoint_socket_from_env(variable=BROKER_SOCKET_ENV, what="Broker API")
    if broker is not None and workload is None:
        raise ValueError(
            "--spiffe-broker-socket needs --spiffe-workload-socket (or $SPIFFE_ENDPOINT_SOCKET): the agent"
            " authenticates to the Broker Endpoint with its own SVID from the Workload API"
        )
    return workload, broker
