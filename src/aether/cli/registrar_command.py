"""`aether registrar`: serve the mesh's endpoint registry from the embedded store, etcd, or Kubernetes."""

from __future__ import annotations

import argparse
import contextlib
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio
import trio_asyncio

from aether.cli.commands import summary
from aether.cli.common import add_verbose_argument, configure_logging, run_until_stopped, tls_files
from aether.cli.kube_options import add_kube_arguments, cluster_config
from aether.cli.telemetry_options import add_telemetry_arguments, running_telemetry
from aether.kube.api import KubeClient
from aether.kube.errors import ConfigError
from aether.registrar import Backend, open_embedded_backend, serve_registrar
from aether.registrar.backends.etcd import open_etcd_backend, parse_etcd_endpoints
from aether.registrar.backends.etcd_layout import DEFAULT_CLUSTER, DEFAULT_REGION, Partition
from aether.registrar.backends.kubernetes import KubernetesBackend
from aether.registrar.gc_pacing import serve_gc_pacing
from aether.rpc.listen import ListenAddress
from aether.rpc.tls import server_tls_context

DEFAULT_LISTEN = "127.0.0.1:18090"
"""Loopback by default: the registrar is reached by agents through whatever the deployment exposes, never all
interfaces unless the operator says so."""

BACKENDS = ("embedded", "etcd", "kubernetes")


def add_parser(roles: Any) -> None:
    """Add `aether registrar` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("registrar", help=summary("registrar"))
    parser.add_argument("--backend", choices=BACKENDS, default="embedded")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="the embedded backend's directory")
    parser.add_argument(
        "--listen", type=ListenAddress.parse, default=ListenAddress.parse(DEFAULT_LISTEN), metavar="ADDRESS"
    )
    parser.add_argument("--etcd-endpoints", metavar="URL,...", help="etcd client URLs (the etcd backend)")
    parser.add_argument(
        "--region", default=DEFAULT_REGION, help="the etcd partition's region (default: %(default)s)"
    )
    parser.add_argument(
        "--cluster-name", default=DEFAULT_CLUSTER, help="the etcd partition's cluster (default: %(default)s)"
    )
    add_kube_arguments(parser, what="the kubernetes backend; default: in-cluster")
    parser.add_argument(
        "--tls-cert",
        type=Path,
        metavar="FILE",
        help="serve mutual TLS with this SVID chain (PEM); with --tls-key",
    )
    parser.add_argument("--tls-key", type=Path, metavar="FILE", help="the SVID's private key (PEM)")
    parser.add_argument(
        "--tls-bundle", type=Path, metavar="FILE", help="the trust bundle clients must chain to"
    )
    parser.add_argument(
        "--trust-domain",
        metavar="NAME",
        help="accept a registration only from the agent of the endpoint's node (needs the --tls-* options)",
    )
    add_telemetry_arguments(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run_registrar)


def run_registrar(arguments: argparse.Namespace) -> int:
    """`aether registrar`: runs until interrupted."""
    if arguments.backend == "etcd":
        if not arguments.etcd_endpoints:
            print("aether: error: --etcd-endpoints URL,... is required with --backend etcd", file=sys.stderr)
            return 2
        try:
            arguments.etcd_targets = parse_etcd_endpoints(arguments.etcd_endpoints)
        except ValueError as error:
            print(f"aether: error: {error}", file=sys.stderr)
            return 2
    if arguments.backend == "embedded" and arguments.data_dir is None:
        print("aether: error: --data-dir DIR is required with --backend embedded", file=sys.stderr)
        return 2
    try:
        files = tls_files(arguments, prefix="tls")
    except ValueError as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return 2
    if arguments.trust_domain and files is None:
        print("aether: error: --trust-domain needs --tls-cert, --tls-key and --tls-bundle", file=sys.stderr)
        return 2
    try:
        tls = None if files is None else server_tls_context(**files)
    except (OSError, ssl.SSLError) as error:
        print(f"aether: error: TLS files: {error}", file=sys.stderr)
        return 2
    try:
        kubernetes = _kubernetes_backend(arguments) if arguments.backend == "kubernetes" else None
    except ConfigError as error:
        print(f"aether: error: {error}", file=sys.stderr)
        return 2
    configure_logging(arguments)

    async def main() -> None:
        async with _open_backend(arguments, kubernetes) as backend, trio.open_nursery() as nursery:
            # Keeps full garbage collections (100+ ms with many agents connected) off the fan-out path.
            await nursery.start(serve_gc_pacing)
            bound = await nursery.start(
                lambda task_status: serve_registrar(
                    backend=backend,
                    listen=arguments.listen,
                    tls=tls,
                    trust_domain=arguments.trust_domain,
                    task_status=task_status,
                )
            )
            print(f"aether registrar: {backend.description} on {bound}", file=sys.stderr, flush=True)

    try:
        with running_telemetry(arguments, role="registrar"):
            run_until_stopped(main)
    except* KeyboardInterrupt:  # bare, or inside the nurseries' exception group
        pass
    return 0


def _kubernetes_backend(arguments: argparse.Namespace) -> KubernetesBackend:
    """The kubernetes backend: `--kube-api`, else `--kubeconfig` (and `--kube-context`), else the pod's own config."""
    config = cluster_config(arguments, required=True)
    assert config is not None  # required: the pod's own config when no option names one
    return KubernetesBackend(KubeClient(config))


@contextlib.asynccontextmanager
async def _open_backend(
    arguments: argparse.Namespace, kubernetes: KubernetesBackend | None
) -> AsyncIterator[Backend]:
    if kubernetes is not None:
        yield kubernetes
        return
    if arguments.backend == "etcd":
        partition = Partition(region=arguments.region, cluster=arguments.cluster_name)
        # grpc.aio (under aetcd) needs the one asyncio loop of the process: trio-asyncio's, open for the run.
        async with (
            trio_asyncio.open_loop() as loop,
            open_etcd_backend(arguments.etcd_targets, partition=partition, loop=loop) as etcd,
        ):
            yield etcd
        return
    async with open_embedded_backend(arguments.data_dir) as embedded:
        yield embedded
