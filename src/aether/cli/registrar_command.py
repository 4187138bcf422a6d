"""`aether registrar`: serve the mesh's endpoint registry (the embedded backend; etcd and Kubernetes come later)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import trio

from aether.registrar import open_embedded_backend, serve_registrar
from aether.xds.listen import ListenAddress

DEFAULT_LISTEN = "127.0.0.1:18090"
"""Loopback by default: the registrar is reached by agents through whatever the deployment exposes, never all
interfaces unless the operator says so."""

BACKENDS = ("embedded", "etcd", "kubernetes")


def add_parser(roles: Any) -> None:
    """Add `aether registrar` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("registrar", help="serve the endpoint registry to agents (RegistrarService)")
    parser.add_argument("--backend", choices=BACKENDS, default="embedded")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="the embedded backend's directory")
    parser.add_argument(
        "--listen", type=ListenAddress.parse, default=ListenAddress.parse(DEFAULT_LISTEN), metavar="ADDRESS"
    )
    parser.add_argument("--etcd-endpoints", metavar="URL,...", help="etcd client URLs (the etcd backend)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO instead of WARNING")
    parser.set_defaults(run=run_registrar)


def run_registrar(arguments: argparse.Namespace) -> int:
    """`aether registrar`: runs until interrupted."""
    if arguments.backend != "embedded":
        print(
            f"aether: error: backend {arguments.backend!r} is not available in this version; use --backend embedded",
            file=sys.stderr,
        )
        return 2
    if arguments.data_dir is None:
        print("aether: error: --data-dir DIR is required with --backend embedded", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO if arguments.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    async def main() -> None:
        async with open_embedded_backend(arguments.data_dir) as backend, trio.open_nursery() as nursery:
            bound = await nursery.start(
                lambda task_status: serve_registrar(
                    backend=backend, listen=arguments.listen, task_status=task_status
                )
            )
            print(f"aether registrar: {arguments.data_dir} on {bound}", file=sys.stderr, flush=True)

    try:
        trio.run(main)
    except KeyboardInterrupt:
        return 0
    return 0
