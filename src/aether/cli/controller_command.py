"""`aether controller`: take part in the leader election and, while leading, write the Gateway API status back and
project the MeshConfigs; serve the admission webhooks on every replica."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

import trio

from aether.cli.commands import summary
from aether.cli.common import add_verbose_argument, configure_logging, run_until_stopped
from aether.cli.kube_options import add_kube_arguments, cluster_config
from aether.cli.telemetry_options import add_telemetry_arguments, running_telemetry
from aether.controller import (
    DEFAULT_LEASE,
    DEFAULT_TIMING,
    DEFAULT_WEBHOOK_PORT,
    SERVING_SECRET,
    ControllerConfig,
    ElectionTiming,
    IdentityCheck,
    LeaseName,
    WebhookOptions,
    serve_controller,
    serve_mesh_config_projection,
    serve_webhooks,
)
from aether.core.validation import dns_subdomain_problem, trust_domain_problem
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
        "--edge-service",
        default="aether-system/aether-edge",
        metavar="NS/NAME",
        help="the edge's LoadBalancer Service: its ingress addresses are written as our Gateways' status.addresses"
        " (default aether-system/aether-edge)",
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
    _add_webhook_arguments(parser)
    add_telemetry_arguments(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run_controller)


def _add_webhook_arguments(parser: Any) -> None:
    webhooks = parser.add_argument_group("admission webhooks (served by every replica)")
    webhooks.add_argument(
        "--webhook-listen",
        default=f"0.0.0.0:{DEFAULT_WEBHOOK_PORT}",
        metavar="HOST:PORT",
        help=f"where the HTTPS webhooks listen (default 0.0.0.0:{DEFAULT_WEBHOOK_PORT})",
    )
    webhooks.add_argument(
        "--webhook-cert",
        type=Path,
        metavar="FILE",
        help="the serving certificate (PEM, e.g. a mounted Secret's tls.crt); without it the replicas share a "
        f"generated one in Secret {'/'.join(SERVING_SECRET)} and write its CA into the caBundles",
    )
    webhooks.add_argument("--webhook-key", type=Path, metavar="FILE", help="its private key (PEM, tls.key)")
    webhooks.add_argument(
        "--init-image",
        metavar="IMAGE",
        help="the aether-identity-ready init container's image (default: this replica's own image, read from "
        "its pod --pod-namespace/--pod-name)",
    )
    webhooks.add_argument(
        "--pod-namespace",
        default="aether-system",
        help="this replica's namespace (default aether-system)",
    )
    webhooks.add_argument(
        "--identity-check",
        choices=[check.value for check in IdentityCheck],
        default=IdentityCheck.INBOUND.value,
        help="how the aether-identity-ready init container checks the pod's SVID: inbound (a TLS handshake with "
        "the pod's own mesh inbound; no volume, admitted by Pod Security baseline) or admin-socket (the node "
        "agent's admin socket through a hostPath volume of /run/aether); default inbound",
    )
    webhooks.add_argument(
        "--mesh-domain",
        help="the mesh domain mutated pods get DNS ndots for (default: the meshDomain of the MeshConfig projected "
        "into aether-system, as the agents read it)",
    )
    webhooks.add_argument(
        "--trust-domain",
        help="the trust domain of the SPIFFE ID the inbound check expects, spiffe://TD/ns/NS/sa/SA (default: "
        "the trustDomain of the MeshConfig projected into aether-system, as the agents read it)",
    )


def _webhook_options(arguments: argparse.Namespace) -> WebhookOptions:
    host, _, port = arguments.webhook_listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(
            f"--webhook-listen: expected HOST:PORT such as 0.0.0.0:{DEFAULT_WEBHOOK_PORT} "
            f"(got {arguments.webhook_listen!r})"
        )
    if (arguments.webhook_cert is None) != (arguments.webhook_key is None):
        raise ValueError("--webhook-cert and --webhook-key: give both or neither")
    if arguments.trust_domain is not None and (problem := trust_domain_problem(arguments.trust_domain)):
        raise ValueError(f"--trust-domain: {problem}")
    if arguments.mesh_domain is not None and (
        problem := dns_subdomain_problem(arguments.mesh_domain, what="the mesh domain")
    ):
        raise ValueError(f"--mesh-domain: {problem}")
    return WebhookOptions(
        host=host.strip("[]"),
        port=int(port),
        cert_file=arguments.webhook_cert,
        key_file=arguments.webhook_key,
        image=arguments.init_image,
        pod_namespace=arguments.pod_namespace,
        pod_name=arguments.pod_name,
        mesh_domain=arguments.mesh_domain,
        trust_domain=arguments.trust_domain,
        identity_check=IdentityCheck(arguments.identity_check),
    )


def _namespaced(flag: str, text: str, *, example: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"{flag}: expected NAMESPACE/NAME such as {example} (got {text!r})")
    return namespace, name


def _lease(text: str) -> LeaseName:
    namespace, name = _namespaced("--lease", text, example=str(DEFAULT_LEASE))
    return LeaseName(namespace=namespace, name=name)


def run_controller(arguments: argparse.Namespace) -> int:
    """`aether controller`: runs until interrupted."""
    configure_logging(arguments)
    try:
        cluster = cluster_config(arguments, required=True)
        config = ControllerConfig(
            identity=arguments.pod_name,
            lease=_lease(arguments.lease),
            edge_service=_namespaced(
                "--edge-service", arguments.edge_service, example="aether-system/aether-edge"
            ),
            timing=ElectionTiming(
                lease_duration=arguments.lease_duration,
                renew_deadline=arguments.renew_deadline,
                retry_period=arguments.retry_period,
            ),
        )
        webhook_options = _webhook_options(arguments)
    except (KubeError, OSError, ValueError) as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    assert cluster is not None, "cluster_config(required=True) returns a config or raises (a bug)"
    client = KubeClient(cluster)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(serve_controller, client, config)
            projection = await nursery.start(
                functools.partial(
                    serve_mesh_config_projection, client, leading=lambda: running.statistics().leading
                )
            )
            await nursery.start(
                functools.partial(
                    serve_webhooks,
                    client,
                    webhook_options,
                    owns_gateway=running.owns_gateway,
                    mesh_config=projection.mesh_config,
                )
            )
            print(
                f"aether controller {config.identity}: api {cluster.server}, lease {config.lease}",
                file=sys.stderr,
                flush=True,
            )

    try:
        with running_telemetry(arguments, role="controller"):
            run_until_stopped(main)
    except* KeyboardInterrupt:  # bare, or inside the nurseries' exception group
        pass
    return 0
