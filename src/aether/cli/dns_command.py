"""`aether mesh-dns`: serve the mesh's DNS names from the agent's record file, forwarding everything else."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from aether.cli.commands import summary
from aether.cli.common import add_verbose_argument, configure_logging, run_until_stopped
from aether.cli.telemetry_options import add_telemetry_arguments, running_telemetry
from aether.dns import (
    HostPort,
    ListenAddressInvalid,
    RunningMeshDns,
    serve_mesh_dns,
    upstreams_from_resolv_conf,
)
from aether.sync import leaves

DEFAULT_DNS_PORT = 18054
"""The port `--listen` defaults to on `$HOST_IP`: unprivileged, so the server needs no CAP_NET_BIND_SERVICE."""
DEFAULT_MESH_DOMAIN = "aether.internal"
RESOLV_CONF = Path("/etc/resolv.conf")


def add_parser(roles: Any) -> None:
    """Add `aether mesh-dns` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("mesh-dns", help=summary("mesh-dns"))
    parser.add_argument("--records", type=Path, required=True, metavar="FILE", help="the agent's record file")
    parser.add_argument(
        "--listen",
        type=_host_port,
        metavar="HOST:PORT",
        help=f"where to serve UDP and TCP (default $HOST_IP:{DEFAULT_DNS_PORT})",
    )
    parser.add_argument(
        "--upstream",
        type=_host_port,
        action="append",
        default=[],
        metavar="HOST:PORT",
        help=f"a resolver for names outside the mesh, repeatable (default: {RESOLV_CONF}'s nameservers)",
    )
    parser.add_argument("--mesh-domain", default=DEFAULT_MESH_DOMAIN, metavar="DOMAIN")
    add_telemetry_arguments(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run_mesh_dns)


def _host_port(text: str) -> HostPort:
    try:
        return HostPort.parse(text, default_port=53)
    except ListenAddressInvalid as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def resolve_listen(listen: HostPort | None, *, environ: Mapping[str, str]) -> HostPort | None:
    """`--listen`, else `$HOST_IP:18054`, else None (the command refuses to start)."""
    if listen is not None:
        return listen
    host_ip = environ.get("HOST_IP", "").strip()
    return HostPort(host=host_ip, port=DEFAULT_DNS_PORT) if host_ip else None


def run_mesh_dns(arguments: argparse.Namespace) -> int:
    """`aether mesh-dns`: runs until interrupted."""
    configure_logging(arguments)
    listen = resolve_listen(arguments.listen, environ=os.environ)
    if listen is None:
        print("aether: error: mesh-dns needs --listen HOST:PORT or $HOST_IP set", file=sys.stderr)
        return 2
    upstreams = tuple(arguments.upstream)
    if not upstreams:
        try:
            upstreams = upstreams_from_resolv_conf(RESOLV_CONF.read_text())
        except OSError as exc:
            print(f"aether: warning: cannot read {RESOLV_CONF}: {exc}; not forwarding", file=sys.stderr)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            server: RunningMeshDns = await nursery.start(
                lambda task_status: serve_mesh_dns(
                    listen=listen,
                    records_path=arguments.records,
                    upstreams=upstreams,
                    mesh_domain=arguments.mesh_domain,
                    task_status=task_status,
                )
            )
            print(
                f"aether mesh-dns: {arguments.mesh_domain} on {server.address} (udp+tcp),"
                f" records {arguments.records}, upstreams {', '.join(map(str, upstreams)) or 'none'}",
                flush=True,
            )

    failed: list[OSError] = []
    try:
        with running_telemetry(arguments, role="mesh-dns"):
            run_until_stopped(main)
    except* KeyboardInterrupt:  # bare, or inside the nurseries' exception group
        pass
    except* OSError as group:
        failed.extend(error for error in leaves(group) if isinstance(error, OSError))
    if failed:
        reason = failed[0].strerror or failed[0]
        print(f"aether: error: mesh-dns cannot listen on {listen}: {reason}", file=sys.stderr)
        return 1
    return 0
