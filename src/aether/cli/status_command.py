"""`aether status`: where each connected Envoy stands, per resource type (SYNCED, STALE, NACKED), from the agent."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aether.cli.commands import summary
from aether.plane.admin_client import DEFAULT_ADMIN_SOCKET, fetch_admin, render_status


def add_parser(roles: Any) -> None:
    """Add `aether status` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("status", help=summary("status"))
    parser.add_argument(
        "--admin", type=Path, default=DEFAULT_ADMIN_SOCKET, metavar="PATH", help="the agent's admin socket"
    )
    parser.set_defaults(run=run_status)


def run_status(arguments: argparse.Namespace) -> int:
    """`aether status`."""
    try:
        document = fetch_admin(arguments.admin, "/status")
    except OSError as exc:
        print(
            f"aether: error: cannot reach the agent's admin socket {str(arguments.admin)!r}: {exc.strerror or exc}"
        )
        print("is `aether agent` running on this node? pass --admin PATH if it listens elsewhere")
        return 1
    if not document["streams"]:
        print("no Envoy is connected")
    for line in render_status(document) if document["streams"] else ():
        print(line)
    for line in _identity_lines(arguments.admin):
        print(line)
    return 0


def _identity_lines(admin: Path) -> list[str]:
    """The pods whose SVID is not served or was rejected, with the reason (from the agent's `/identity`)."""
    try:
        document = fetch_admin(admin, "/identity")
    except (OSError, ValueError):
        return []  # an agent without the document (an older one): nothing to add
    lines = []
    for pod in document["pods"]:
        if not pod["served"]:
            lines.append(f"identity {pod['pod']}: NOT SERVED ({pod['spiffeId']}) {pod['rejection']}".rstrip())
        elif pod["rejection"]:
            lines.append(f"identity {pod['pod']}: serving the last good SVID; rejected: {pod['rejection']}")
        disagreement = (pod.get("broker") or {}).get("bundleDisagreement")
        if disagreement:
            lines.append(f"identity {pod['pod']}: bundles: {disagreement}")
        if pod["served"] and pod.get("http3"):
            lines.append(f"identity {pod['pod']}: no HTTP/3: {pod['http3']}")
    return lines
