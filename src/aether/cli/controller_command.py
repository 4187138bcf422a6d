"""`aether controller`: take part in the leader election and, while leading, write the Gateway API status back."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import trio

from aether.cli.commands import summary
from aether.cli.common import add_verbose_argument, configure_logging
from aether.cli.kube_options import add_kube_arguments, cluster_config
from aether.cli.telemetry_options import add_telemetry_arguments, running_telemetry
from aether.controller import (
    DEFAULT_LEASE,
    DEFAULT_TIMING,
    ControllerConfig,
    ElectionTiming,
    LeaseName,
    serve_controller,
)
from aether.kube import KubeClient, KubeError

EXIT_USAGE = 2


def add_parser(roles: Any) -> None:
    """Add `aether controller` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("controller", help=summary("controller"))
    parser.add_argument(
        "--pod-name", required=True, help="this replica's pod name: its holderIdentity in the Lease"
    )
    add_kube_arguments(parser, what="default: in-cluster")
    parser.add_argument(
        "--lease",
        default=str(DEFAULT_LEASE),
        metavar="NS/NAME",
        help=f"the coordination.k8s.io/v1 Lease of the election (default {DEFAULT_LEASE})",
    )
    parser.add_argument(
        "--lease-duration",
        type=float,
        default=DEFAULT_TIMING.lease_duration,
        metavar="SECONDS",
        help=f"how long a silent leader's lease lasts (default {DEFAULT_TIMING.lease_duration:g}, client-go's)",
    )
    parser.add_argument(
        "--renew-deadline",
        type=float,
        default=DEFAULT_TIMING.renew_deadline,
        metavar="SECONDS",
        help=f"the leader steps down after failing to renew this long (default {DEFAULT_TIMING.renew_deadline:g})",
    )
    parser.add_argument(
        "--retry-period",
        type=float,
        default=DEFAULT_TIMING.retry_period,
        metavar="SECONDS",
        help=f"between attempts to take or renew the lease (default {DEFAULT_TIMING.retry_period:g})",
    )
    add_telemetry_arguments(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run_controller)


def _lease(text: str) -> LeaseName:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"--lease: expected NAMESPACE/NAME such as {DEFAULT_LEASE} (got {text!r})")
    return LeaseName(namespace=namespace, name=name)


def run_controller(arguments: argparse.Namespace) -> int:
    """`aether controller`: runs until interrupted."""
    configure_logging(arguments)
    try:
        cluster = cluster_config(arguments, required=True)
        config = ControllerConfig(
            identity=arguments.pod_name,
            lease=_lease(arguments.lease),
            timing=ElectionTiming(
                lease_duration=arguments.lease_duration,
                renew_deadline=arguments.renew_deadline,
                retry_period=arguments.retry_period,
            ),
        )
    except (KubeError, OSError, ValueError) as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    assert cluster is not None, "cluster_config(required=True) returns a config or raises (a bug)"
    client = KubeClient(cluster)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_controller, client, config)
            print(
                f"aether controller {config.identity}: api {cluster.server}, lease {config.lease}",
                file=sys.stderr,
                flush=True,
            )

    with contextlib.suppress(KeyboardInterrupt), running_telemetry(arguments, role="controller"):
        trio.run(main)
    return 0
