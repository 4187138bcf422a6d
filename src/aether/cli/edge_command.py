"""`aether edge`: run the edge's control plane (journal, edge projection, xDS server, admin socket) in the foreground."""

from __future__ import annotations

import argparse
import ssl
import sys
from pathlib import Path
from typing import Any

import trio

from aether.cli.commands import summary
from aether.cli.common import (
    EXIT_LOG_OWNED,
    add_envoy_traces_argument,
    add_mesh_config_argument,
    add_serving_arguments,
    add_verbose_argument,
    configure_logging,
    run_until_stopped,
)
from aether.cli.kube_options import add_kube_arguments, cluster_config
from aether.cli.registrar_options import add_registrar_watch_arguments, registrar_tls_context
from aether.cli.spiffe_options import add_spiffe_arguments, spiffe_sockets
from aether.cli.telemetry_options import add_telemetry_arguments, running_telemetry
from aether.core.project.edge import DEFAULT_EDGE_SERVICE
from aether.core.project.names import ANY_ADDRESS
from aether.edge.app import DEFAULT_EDGE_ADMIN_SOCKET, EdgeConfig, RunningEdge, serve_edge
from aether.kube import KubeClient, KubeError
from aether.kube.manifests import ManifestError
from aether.log import LogLockedError
from aether.sync import leaves

EXIT_UNREADABLE = 1
"""The manifests could not be read at start-up."""


def add_parser(roles: Any) -> None:
    """Add `aether edge` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("edge", help=summary("edge"))
    parser.add_argument(
        "--pod-name", required=True, help="the edge pod's name (Envoy's node id must equal it)"
    )
    parser.add_argument("--log-dir", type=Path, required=True, metavar="DIR", help="the edge's event log")
    parser.add_argument(
        "--manifests",
        type=Path,
        metavar="DIR",
        help="read the objects (and, without --registrar, the pods behind the backends) from a directory of YAML"
        " manifests: for local runs, instead of the Kubernetes API",
    )
    add_kube_arguments(
        parser,
        what="watch Gateways, their routes, Services, grants, Namespaces and TLS Secrets; needs --registrar",
    )
    add_registrar_watch_arguments(parser, who="the edge's identity")
    add_serving_arguments(
        parser,
        admin_socket=DEFAULT_EDGE_ADMIN_SOCKET,
        svid_help="read the edge's SVID and the bundle from files",
    )
    parser.add_argument(
        "--service",
        default=DEFAULT_EDGE_SERVICE,
        metavar="NS/SA",
        help=f"the edge's mesh service, whose SVID it presents (default {DEFAULT_EDGE_SERVICE})",
    )
    parser.add_argument("--bind", default=ANY_ADDRESS, metavar="ADDRESS", help="where Gateway listeners bind")
    parser.add_argument(
        "--identity",
        choices=("spiffe", "spire", "none"),
        default="spiffe",
        help="none: cleartext HTTP/2 to backends; spire: mTLS, Envoy fetching the SVID from the SPIRE agent's SDS"
        " (bootstrap with --spiffe-workload-socket); default spiffe: mTLS with the SVID the edge serves",
    )
    add_mesh_config_argument(parser)
    add_envoy_traces_argument(parser)
    add_spiffe_arguments(parser, broker=False)
    add_telemetry_arguments(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run_edge)


def _sources(config: EdgeConfig) -> str:
    """Where the edge's objects and endpoints come from, for the start-up line."""
    objects = (
        f"manifests {config.manifests}" if config.kube is None else f"kubernetes {config.kube.config.server}"
    )
    registry = "the manifests' pods" if config.registrar is None else f"registrar {config.registrar}"
    return f"{objects}, endpoints from {registry}"


def run_edge(arguments: argparse.Namespace) -> int:
    """`aether edge`: runs until interrupted; exits 1 when the manifests cannot be read at start-up, 2 on options
    that do not go together (the objects come from exactly one of --manifests and the API; the API needs
    --registrar), 3 when another process owns the log (without `--standby`)."""
    configure_logging(arguments)
    try:
        workload_socket = None if arguments.identity == "spire" else spiffe_sockets(arguments)[0]
        cluster = cluster_config(arguments, required=False)
        tls = registrar_tls_context(arguments)
        if (cluster is None) == (arguments.manifests is None):
            raise ValueError(
                "give --manifests DIR (local runs) or one of --kube-api, --kubeconfig, --in-cluster (a cluster),"
                " not both: the two sources own the same objects"
            )
        if cluster is not None and arguments.registrar is None:
            raise ValueError(
                "--kube-api/--kubeconfig/--in-cluster need --registrar ADDRESS: in a cluster the backends'"
                " endpoints come from the registrar"
            )
    except (KubeError, OSError, ssl.SSLError, ValueError) as bad:
        print(f"aether: error: {bad}", file=sys.stderr)
        return 2
    config = EdgeConfig(
        pod_name=arguments.pod_name,
        log_dir=arguments.log_dir,
        manifests=arguments.manifests,
        kube=None if cluster is None else KubeClient(cluster),
        registrar=arguments.registrar,
        registrar_tls=tls,
        cluster_name=arguments.cluster_name,
        xds=arguments.xds,
        admin_socket=arguments.admin_socket,
        svid_dir=arguments.svid_dir,
        service=arguments.service,
        bind=arguments.bind,
        cleartext=arguments.identity == "none",
        mesh_config=arguments.mesh_config,
        envoy_traces=arguments.envoy_traces,
        spire_sds=arguments.identity == "spire",
        spiffe_workload_socket=workload_socket,
        standby=arguments.standby,
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            edge: RunningEdge = await nursery.start(serve_edge, config)
            print(
                f"aether edge {config.pod_name}: log {config.log_dir} at seq {edge.journal.state.seq},"
                f" {_sources(config)}, xds {edge.xds}, admin {config.admin_socket}",
                file=sys.stderr,
                flush=True,
            )

    unreadable: list[BaseException] = []
    owned: list[BaseException] = []
    try:
        with running_telemetry(arguments, role="edge"):
            run_until_stopped(main)
    except* ManifestError as group:
        unreadable.extend(leaves(group))
    except* LogLockedError as group:
        owned.extend(leaves(group))
    except* KeyboardInterrupt:
        pass
    for error in (*unreadable, *owned):
        print(f"aether edge: error: {error}", file=sys.stderr)
    return EXIT_LOG_OWNED if owned else EXIT_UNREADABLE if unreadable else 0
