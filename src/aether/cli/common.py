"""Options and set-up shared by the long-running roles (`agent`, `edge`, `registrar`, `mesh-dns`, `demo`)."""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

__all__ = [
    "EXIT_LOG_OWNED",
    "add_serving_arguments",
    "add_verbose_argument",
    "configure_logging",
    "run_until_stopped",
    "tls_files",
]

EXIT_LOG_OWNED = 3
"""The exit status of a control plane started on a log another process owns (without `--standby`)."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def run_until_stopped(main: Callable[[], Awaitable[object]]) -> None:
    """Run `main` under trio until it returns or the process gets SIGTERM or SIGINT, which stop it gracefully.

    SIGTERM is how Kubernetes (and systemd, and `kill`) asks a process to stop, SIGINT is Ctrl-C. Python's
    default for SIGTERM ends the process on the spot, skipping every `finally` and `async with` exit (Envoy
    children left to their death signal, telemetry not flushed, streams not closed); its default for SIGINT
    raises `KeyboardInterrupt` wherever the interpreter happens to be, which trio can deliver into any task,
    even one that is half-way through a write or that swallows it (a registrar interrupted this way sometimes
    stayed up). Here both cancel `main` instead: it unwinds at its checkpoints like any cancelled trio code, and
    then this function returns normally, so the role exits 0.
    """

    async def until_stopped() -> None:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal(
                *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
            ) -> None:
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()  # from here on the signals are ours, so `main` starts only now
                    async for number in signals:
                        logging.getLogger(__name__).info("%s: stopping", signal.Signals(number).name)
                        nursery.cancel_scope.cancel()

            await nursery.start(stop_on_signal)
            await main()
            nursery.cancel_scope.cancel()

    trio.run(until_stopped)


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


def add_envoy_traces_argument(parser: Any) -> None:
    """`--envoy-traces`: Envoy's bootstrap declares the collector (`aether bootstrap --otlp-endpoint`), so the
    projection may point Envoy's OpenTelemetry tracer at it (`aether.core.project.tracing`)."""
    parser.add_argument(
        "--envoy-traces",
        action="store_true",
        help="Envoy's bootstrap declares the collector (aether bootstrap --otlp-endpoint): when the MeshConfig"
        " enables tracing, Envoy sends its spans there at the MeshConfig's traceSampleRate",
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
