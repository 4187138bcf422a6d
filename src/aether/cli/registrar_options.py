"""The registrar watch's options shared by the roles that watch it (`aether agent`, `aether edge`)."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path
from typing import Any

from aether.cli.common import tls_files
from aether.rpc.listen import ListenAddress
from aether.rpc.tls import client_tls_context

__all__ = ["add_registrar_watch_arguments", "registrar_tls_context"]


def add_registrar_watch_arguments(parser: Any, *, who: str) -> None:
    """Add `--registrar`, `--cluster-name` and `--registrar-cert/-key/-bundle` to `parser`; `who` names the
    identity the certificate stands for ("this agent's node identity")."""
    parser.add_argument(
        "--registrar",
        type=ListenAddress.parse,
        metavar="ADDRESS",
        help="watch the registrar at unix:PATH or HOST:PORT",
    )
    parser.add_argument(
        "--cluster-name", default="local", help="this cluster's name (the registrar watch id)"
    )
    for name, what in (("cert", "certificate chain"), ("key", "private key"), ("bundle", "trust bundle")):
        parser.add_argument(
            f"--registrar-{name}",
            type=Path,
            metavar="FILE",
            help=f"mTLS to the registrar: {who} {what} (PEM; give all three)",
        )


def registrar_tls_context(arguments: argparse.Namespace) -> ssl.SSLContext | None:
    """The mTLS context of `--registrar-cert/-key/-bundle`, or None when none is given.

    Raises:
        ValueError: Some but not all of the three are given.
        OSError, ssl.SSLError: A file cannot be read or loaded.
    """
    files = tls_files(arguments, prefix="registrar")
    return None if files is None else client_tls_context(**files)
