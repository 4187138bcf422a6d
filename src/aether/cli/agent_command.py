"""`aether agent`: run one node's agent (journal, projection, xDS server, admin socket) in the foreground."""

from __future__ import annotations

import argparse
import ssl
import sys
from pathlib import Path
from typing import Any

import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
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
from aether.cni.api import DEFAULT_CNI_SOCKET
from aether.cni.wire import DEFAULT_PLUGIN_SOCKET
from aether.kube import KubeClient, KubeError
from aether.log import LogLockedError
from aether.plane.admin_client import DEFAULT_ADMIN_SOCKET
from aether.sync import leaves


def add_parser(roles: Any) -> None:
    """Add `aether agent` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("agent", help=summary("agent"))
    parser.add_argument("--node-name", required=True, help="this node's name (Envoy's node id must equal it)")
    parser.add_argument("--log-dir", type=Path, required=True, metavar="DIR", help="the node's event log")
    add_serving_arguments(
        parser, admin_socket=DEFAULT_ADMIN_SOCKET, svid_help="read SVIDs and the trust bundle from files"
    )
    add_registrar_watch_arguments(parser, who="this agent's node identity")
    parser.add_argument(
        "--cni-socket",
        type=Path,
        metavar="PATH",
        help=f"serve the CNI service for aether-cni on this Unix socket (the plugin's default: {DEFAULT_CNI_SOCKET})",
    )
    parser.add_argument(
        "--cni-plugin-socket",
        type=Path,
        metavar="PATH",
        help=f"run the commands of the host's aether-cni executable, forwarded on this Unix socket (its default:"
        f" {DEFAULT_PLUGIN_SOCKET}); the agent then programs pod namespaces (root, NET_ADMIN, SYS_ADMIN);"
        " needs --cni-socket",
    )
    parser.add_argument(
        "--dns-records",
        type=Path,
        metavar="FILE",
        help="write the mesh-dns record file here (for aether mesh-dns)",
    )
    add_kube_arguments(parser, what="watch Services, Gateway API objects, grants and this node's pods")
    add_mesh_config_argument(parser)
    add_envoy_traces_argument(parser)
    add_spiffe_arguments(parser)
    add_telemetry_arguments(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run_agent)


def run_agent(arguments: argparse.Namespace) -> int:
    """`aether agent`: runs until interrupted; a kill at any moment leaves the log valid (replayed at start).

    Exits 3 when another process owns the log (without `--standby`), naming its pid."""
    configure_logging(arguments)
    if arguments.cni_plugin_socket is not None and arguments.cni_socket is None:
        print(
            "aether: error: --cni-plugin-socket needs --cni-socket (the CNI service it runs)", file=sys.stderr
        )
        return 2
    try:
        cluster = cluster_config(arguments, required=False)
        registrar_tls = registrar_tls_context(arguments)
        workload_socket, broker_socket = spiffe_sockets(arguments)
    except (KubeError, OSError, ssl.SSLError, ValueError) as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return 2
    config = AgentConfig(
        node_name=arguments.node_name,
        log_dir=arguments.log_dir,
        xds=arguments.xds,
        admin_socket=arguments.admin_socket,
        svid_dir=arguments.svid_dir,
        registrar=arguments.registrar,
        cluster_name=arguments.cluster_name,
        cni_socket=arguments.cni_socket,
        cni_plugin_socket=arguments.cni_plugin_socket,
        dns_records=arguments.dns_records,
        mesh_config=arguments.mesh_config,
        envoy_traces=arguments.envoy_traces,
        kube=None if cluster is None else KubeClient(cluster),
        registrar_tls=registrar_tls,
        spiffe_workload_socket=workload_socket,
        spiffe_broker_socket=broker_socket,
        registrar_spiffe=arguments.registrar_spiffe,
        standby=arguments.standby,
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            agent: RunningAgent = await nursery.start(serve_agent, config)
            replay = agent.journal.replay
            print(
                f"aether agent {config.node_name}: log {config.log_dir} at seq {agent.journal.state.seq}"
                f" ({replay.records_folded} records replayed), xds {agent.xds}, admin {config.admin_socket}",
                file=sys.stderr,
                flush=True,
            )

    owned: list[BaseException] = []
    try:
        with running_telemetry(arguments, role="agent"):
            run_until_stopped(main)
    except* LogLockedError as group:
        owned.extend(leaves(group))
    except* KeyboardInterrupt:
        pass
    for refused in owned:
        print(f"aether agent: error: {refused}", file=sys.stderr)
    return EXIT_LOG_OWNED if owned else 0
