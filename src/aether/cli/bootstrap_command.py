"""`aether bootstrap`: print the ADS bootstrap a node's (or the edge's) Envoy starts with, so no one writes it by hand."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from aether.cli.commands import summary

EXIT_USAGE = 2


def add_parser(roles: Any) -> None:
    """Add `aether bootstrap` to the root parser's subparsers `roles`."""
    from aether.plane.plane import DEFAULT_XDS_SOCKET
    from aether.rpc.listen import ListenAddress

    parser = roles.add_parser("bootstrap", help=summary("bootstrap"))
    parser.add_argument(
        "--node-name",
        required=True,
        help="Envoy's node id: the node's name (agent) or the edge pod's name (edge)",
    )
    parser.add_argument(
        "--xds",
        type=ListenAddress.parse,
        default=ListenAddress.unix(DEFAULT_XDS_SOCKET),
        metavar="ADDRESS",
        help=f"where the control plane serves xDS: unix:PATH or IP:PORT (default unix:{DEFAULT_XDS_SOCKET})",
    )
    parser.add_argument(
        "--admin",
        type=ListenAddress.parse,
        default=ListenAddress.tcp(host="127.0.0.1", port=0),
        metavar="127.0.0.1:PORT",
        help="Envoy's admin API, on loopback only (default 127.0.0.1:0: a free port)",
    )
    parser.add_argument(
        "--spiffe-workload-socket",
        type=Path,
        metavar="PATH",
        help="declare the SPIRE agent's Workload API socket as cluster spire_agent: the edge's Envoy takes its"
        " SVID and bundle from SPIRE's SDS there (aether edge --identity spire)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="push Envoy's stats to the OpenTelemetry collector's OTLP/gRPC receiver, e.g. http://collector:4317"
        " (declared as cluster otel_collector: run the agent or edge with --envoy-traces to send Envoy's spans there too)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the bootstrap to FILE (written whole, then renamed) instead of printing it",
    )
    parser.set_defaults(run=run_bootstrap)


def bootstrap_of(arguments: argparse.Namespace) -> dict[str, Any]:
    """The bootstrap the options describe: `aether.envoy.ads_bootstrap` over Delta ADS, as `aether demo` starts
    its Envoy with.

    Raises:
        ValueError: `--xds` listens on all interfaces (no address to dial), `--admin` is not on loopback, or
            `--otlp-endpoint` does not parse.
    """
    from aether.envoy.bootstrap import ads_bootstrap

    xds, admin = arguments.xds, arguments.admin
    if xds.path is None and not xds.host:
        raise ValueError(f"--xds: give the address Envoy dials, not all interfaces (got {str(xds)!r})")
    if admin.path is not None or admin.host != "127.0.0.1":
        raise ValueError(
            f"--admin: Envoy's admin API listens on loopback only: give 127.0.0.1:PORT (got {str(admin)!r})"
        )
    otlp = None
    if arguments.otlp_endpoint is not None:
        from aether.telemetry import DEFAULT_OTLP_GRPC_PORT, OtlpEndpoint

        endpoint = OtlpEndpoint.parse(arguments.otlp_endpoint, default_port=DEFAULT_OTLP_GRPC_PORT)
        if endpoint.scheme != "http":
            raise ValueError(
                f"--otlp-endpoint {arguments.otlp_endpoint!r}: Envoy's stats sink dials cleartext gRPC here: give http://HOST:PORT"
            )
        otlp = (endpoint.host, endpoint.port)
    return ads_bootstrap(
        node_id=arguments.node_name,
        otlp_grpc=otlp,
        xds_unix_socket=xds.path,
        xds_tcp=None if xds.path is not None else (xds.host, xds.port),
        delta=True,
        admin_port=admin.port,
        spire_socket=arguments.spiffe_workload_socket,
    )


def run_bootstrap(arguments: argparse.Namespace) -> int:
    """`aether bootstrap`: prints (or writes) the bootstrap as JSON; 2 when the options cannot make one."""
    if not arguments.node_name.strip():
        print("aether: error: --node-name must not be empty (Envoy's node id)", file=sys.stderr)
        return EXIT_USAGE
    try:
        text = json.dumps(bootstrap_of(arguments), indent=2, sort_keys=True) + "\n"
    except ValueError as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if arguments.output is None:
        sys.stdout.write(text)
        return 0
    partial = arguments.output.with_name(f".{arguments.output.name}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, arguments.output)
    except OSError as error:
        print(
            f"aether: error: cannot write {str(arguments.output)!r}: {error.strerror or error}",
            file=sys.stderr,
        )
        return 1
    return 0
