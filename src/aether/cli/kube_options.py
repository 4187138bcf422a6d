"""The Kubernetes API options shared by the roles that watch it (`aether agent`, `aether registrar`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aether.kube import ClusterConfig

__all__ = ["add_kube_arguments", "cluster_config"]


def add_kube_arguments(parser: Any, *, what: str) -> None:
    """Add `--kube-api`, `--kubeconfig`, `--kube-context` and `--in-cluster` to `parser`; `what` says what for."""
    parser.add_argument("--kube-api", metavar="URL", help=f"the Kubernetes API server ({what})")
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE", help=f"a kubeconfig ({what})")
    parser.add_argument(
        "--kube-context", metavar="NAME", help="the kubeconfig context (default: its current one)"
    )
    parser.add_argument(
        "--in-cluster",
        action="store_true",
        help=f"use the pod's service account to reach the API ({what})",
    )


def cluster_config(arguments: argparse.Namespace, *, required: bool) -> ClusterConfig | None:
    """Return the API the options name: `--kube-api`, else `--kubeconfig`, else `--in-cluster`; when none is given,
    the pod's own config if `required`, else None.

    Raises:
        aether.kube.ConfigError: The kubeconfig or the in-cluster files cannot be used.
    """
    if arguments.kube_api:
        return ClusterConfig.from_url(arguments.kube_api)
    if arguments.kubeconfig:
        return ClusterConfig.from_kubeconfig(arguments.kubeconfig, context=arguments.kube_context)
    if arguments.in_cluster or required:
        return ClusterConfig.from_in_cluster()
    return None
