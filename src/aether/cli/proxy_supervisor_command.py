"""`aether proxy-supervisor`: PID 1 of the proxy container (`aether.envoy.supervisor`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from aether.cli.commands import summary
from aether.cli.common import add_verbose_argument, configure_logging

if TYPE_CHECKING:
    from aether.envoy.supervisor import SupervisorConfig

DEFAULT_RUNTIME_DIR = Path("/run/aether/proxy")
"""Node-local (a hostPath): the old and the new proxy pod of a roll meet here."""


def add_parser(roles: Any) -> None:
    """Add `aether proxy-supervisor` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("proxy-supervisor", help=summary("proxy-supervisor"))
    parser.add_argument("--bootstrap", type=Path, required=True, metavar="FILE", help="Envoy's bootstrap")
    parser.add_argument(
        "--node-name", required=True, help="this node's name (the hot-restart base id comes from it)"
    )
    parser.add_argument(
        "--runtime-dir",
        type=Path,
        default=DEFAULT_RUNTIME_DIR,
        metavar="DIR",
        help=f"node-local directory for the hot-restart socket, epoch and pid (default {DEFAULT_RUNTIME_DIR})",
    )
    parser.add_argument(
        "--base-id", type=int, metavar="N", help="Envoy's --base-id (default: from --node-name)"
    )
    parser.add_argument("--drain-time-s", type=int, default=5, metavar="S", help="the old Envoy's drain time")
    parser.add_argument(
        "--parent-shutdown-time-s",
        type=int,
        default=10,
        metavar="S",
        help="when the old Envoy is told to exit",
    )
    parser.add_argument(
        "--ready-file",
        type=Path,
        metavar="FILE",
        help="a pod-local file kept while this pod's Envoy serves the node and is ready (for a readiness probe)",
    )
    parser.add_argument("envoy_args", nargs=argparse.REMAINDER, help="more Envoy arguments, after --")
    add_verbose_argument(parser)
    parser.set_defaults(run=run_proxy_supervisor)


def run_proxy_supervisor(arguments: argparse.Namespace) -> int:
    """`aether proxy-supervisor`: runs until SIGTERM/SIGINT/SIGQUIT; exits with the newest Envoy's status (128 + N
    for a death by signal N), or 2 when the bootstrap or the Envoy binary is missing."""
    from aether.envoy.supervisor import ProxySupervisor

    configure_logging(arguments)
    if not arguments.bootstrap.is_file():
        # Envoy would say only "Invalid path" and be restarted with backoff forever: a pod that can never start.
        print(
            f"aether proxy-supervisor: error: --bootstrap {arguments.bootstrap} is not a file "
            "(write it first, e.g. with `aether bootstrap` in an init container)",
            file=sys.stderr,
        )
        return 2
    config = supervisor_config(arguments)
    try:
        supervisor = ProxySupervisor(config)
    except FileNotFoundError as error:
        print(f"aether proxy-supervisor: error: {error}", file=sys.stderr)
        return 2
    return trio.run(supervisor.run)


def supervisor_config(arguments: argparse.Namespace) -> SupervisorConfig:
    """The supervisor's configuration from `aether proxy-supervisor`'s parsed arguments."""
    from aether.envoy.supervisor import SupervisorConfig

    extra = arguments.envoy_args[1:] if arguments.envoy_args[:1] == ["--"] else arguments.envoy_args
    return SupervisorConfig(
        bootstrap=arguments.bootstrap,
        node_name=arguments.node_name,
        runtime_dir=arguments.runtime_dir,
        base_id=arguments.base_id,
        drain_time_s=arguments.drain_time_s,
        parent_shutdown_time_s=arguments.parent_shutdown_time_s,
        extra_args=tuple(extra),
        ready_file=arguments.ready_file,
    )
