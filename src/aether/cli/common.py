"""Options and set-up shared by the long-running roles (`agent`, `edge`, `registrar`, `mesh-dns`, `demo`)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

__all__ = [
    "EXIT_LOG_OWNED",
    "add_serving_arguments",
    "add_verbose_argument",
    "configure_logging",
    "tls_files",
]

EXIT_LOG_OWNED = 3
"""The exit status of a control plane started on a log another process owns (without `--standby`)."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_verbose_argument(parser: Any) -> None:
    """Add `-v/--verbose` (log at INFO; quiet by default)."""
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO instead of WARNING")


def configure_logging(arguments: argparse.Namespace, *, quiet: int = logging.WARNING) -> None:
    """Log to stderr at INFO with `--verbose`, else at `quiet` (structured one-line records)."""
    logging.basicConfig(level=logging.INFO if arguments.verbose else quiet, format=LOG_FORMAT)


def add_serving_arguments(parser: Any, *, admin_socket: Path, svid_help: str) -> None:
    """Add `--xds`, `--admin-socket` and `--svid-dir`: where a control plane serves its Envoy and what it reads."""
    # Only the roles that serve Envoy build this parser: `aether --help` does not import the xDS server.
    from aether.plane.plane import DEFAULT_XDS_SOCKET
    from aether.rpc.listen import ListenAddress

    parser.add_argument(
        "--xds",
        type=ListenAddress.parse,
        default=ListenAddress.unix(DEFAULT_XDS_SOCKET),
        metavar="ADDRESS",
        help=f"where Envoy connects: unix:PATH or HOST:PORT (default unix:{DEFAULT_XDS_SOCKET})",
    )
    parser.add_argument("--admin-socket", type=Path, default=admin_socket, metavar="PATH")
    parser.add_argument("--svid-dir", type=Path, metavar="DIR", help=svid_help)
    parser.add_argument(
        "--standby",
        action="store_true",
        help="when another process owns --log-dir: build the snapshot from its log, then bind the sockets the"
        f" moment it exits (without it: exit {EXIT_LOG_OWNED}, naming the owner's pid)",
    )


def add_mesh_config_argument(parser: Any) -> None:
    """`--mesh-config FILE`: the projected MeshConfig (the ConfigMap aether-mesh-config mounted) read as a source."""
    parser.add_argument(
        "--mesh-config",
        type=Path,
        metavar="FILE",
        help="read the mesh settings from this projected MeshConfig file, e.g. "
        "/etc/aether/mesh-config/mesh-config.yaml (a missing file keeps the defaults; a bad one the last good)",
    )


def tls_files(arguments: argparse.Namespace, *, prefix: str) -> dict[str, Path] | None:
    """The `--<prefix>-cert`, `--<prefix>-key` and `--<prefix>-bundle` files as the keyword arguments of
    `aether.rpc.tls`'s context builders, or None when none is given.

    Raises:
        ValueError: Some but not all of the three are given.
    """
    attribute = prefix.replace("-", "_")
    files = {
        "certificate": getattr(arguments, f"{attribute}_cert"),
        "key": getattr(arguments, f"{attribute}_key"),
        "bundle": getattr(arguments, f"{attribute}_bundle"),
    }
    if not any(files.values()):
        return None
    if not all(files.values()):
        raise ValueError(f"--{prefix}-cert, --{prefix}-key and --{prefix}-bundle go together: give all three")
    return files
