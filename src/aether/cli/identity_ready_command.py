"""`aether identity-ready`: the check the controller's injected init container runs; it holds the pod's
application containers until the pod's X.509-SVID is served by its node agent.

The pod asks its node agent's admin socket (the `/run/aether` host directory mounted read-only into the init
container) for the `/identity` document, and finds its own entry by namespace and name (the Downward API's
`POD_NAMESPACE` and `POD_NAME`). It exits 0 as soon as the entry says `served`, and 1 with the reason (the SVID's
rejection, the broker's last error, or "the agent does not know the pod") once `--timeout` passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from aether.cli.commands import summary
from aether.plane.admin_client import DEFAULT_ADMIN_SOCKET, fetch_admin

IDENTITY_DOCUMENT = "/identity"
"""The admin socket's document (`aether.identity.status.IDENTITY_DOCUMENT`; a test keeps them equal)."""
POLL_INTERVAL = 0.2
"""Seconds between two asks: an SVID arrives within milliseconds of the pod's ADD, so this bounds the delay."""


def add_parser(roles: Any) -> None:
    """Add `aether identity-ready` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("identity-ready", help=summary("identity-ready"))
    parser.add_argument(
        "--admin",
        type=Path,
        default=DEFAULT_ADMIN_SOCKET,
        metavar="PATH",
        help="the node agent's admin socket",
    )
    parser.add_argument(
        "--namespace", default=os.environ.get("POD_NAMESPACE", ""), help="default: $POD_NAMESPACE"
    )
    parser.add_argument("--pod", default=os.environ.get("POD_NAME", ""), help="default: $POD_NAME")
    parser.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="give up after (default 60)"
    )
    parser.set_defaults(run=run_identity_ready)


def pod_identity_reason(document: dict[str, Any], pod: str) -> str | None:
    """Return None when `pod`'s SVID is served per the `/identity` document, else why not."""
    entry = next((item for item in document.get("pods", []) if item["pod"] == pod), None)
    if entry is None:
        return f"the node agent does not know pod {pod!r} (not added by the CNI yet, or not managed)"
    if entry["served"]:
        return None
    reasons = [f"no SVID is served for {entry['spiffeId']!r}"]
    if entry.get("rejection"):
        reasons.append(f"rejected: {entry['rejection']}")
    broker = entry.get("broker") or {}
    if broker.get("lastError"):
        reasons.append(f"broker: {broker['lastError']}")
    return "; ".join(reasons)


def run_identity_ready(arguments: argparse.Namespace) -> int:
    """`aether identity-ready`: 0 once served, 1 with the reason after the timeout, 2 for a usage error."""
    if not arguments.namespace or not arguments.pod:
        print(
            "aether: error: give --namespace and --pod (or set POD_NAMESPACE and POD_NAME)", file=sys.stderr
        )
        return 2
    pod = f"{arguments.namespace}/{arguments.pod}"
    deadline = time.monotonic() + arguments.timeout
    while True:
        try:
            reason = pod_identity_reason(fetch_admin(arguments.admin, IDENTITY_DOCUMENT), pod)
        except (OSError, ValueError) as exc:
            reason = f"cannot ask the node agent at {str(arguments.admin)!r}: {exc}"
        if reason is None:
            print(f"pod {pod}: SVID served")
            return 0
        if time.monotonic() >= deadline:
            print(
                f"aether: pod {pod}: identity not ready after {arguments.timeout:g} s: {reason}",
                file=sys.stderr,
            )
            return 1
        time.sleep(POLL_INTERVAL)
