"""`aether identity-ready`: the check the controller's injected init container runs; it holds the pod's
application containers until the pod's X.509-SVID is served by its node agent. Two ways to ask:

- `--inbound [HOST:PORT]` (what the controller injects): a TLS handshake with the pod's own mesh inbound
  (`$POD_IP:18008` by default; the init container shares the pod's network), whose certificate must be the pod's
  SVID, `spiffe://<td>/ns/$POD_NAMESPACE/sa/$POD_SERVICE_ACCOUNT`, valid now (`aether.identity.served`); with
  `--bundle FILE` its chain must also verify against that trust bundle. No volume, no privilege: it passes the
  Pod Security "baseline" and "restricted" levels. It proves what Envoy serves, which is the point; the agent's
  reasons (a rejection, the broker's error) are not visible from there, so the failure names what the handshake
  found.
- `--admin PATH` (the default without `--inbound`): the node agent's admin socket (the node's `/run/aether`
  mounted read-only: a hostPath volume) gives the `/identity` document, and the pod's entry by namespace and name
  (`POD_NAMESPACE`, `POD_NAME`) must say `served`; a failure carries the agent's reason (the SVID's rejection, the
  broker's last error, or "the agent does not know the pod").

It exits 0 as soon as the check passes, and 1 with the last reason once `--timeout` passes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aether.cli.commands import summary
from aether.plane.admin_client import DEFAULT_ADMIN_SOCKET, fetch_admin

IDENTITY_DOCUMENT = "/identity"
"""The admin socket's document (`aether.identity.status.IDENTITY_DOCUMENT`; a test keeps them equal)."""
MESH_INBOUND_PORT = 18008
"""The pod's mesh inbound (`aether.core.project.names.MESH_INBOUND_PORT`; a test keeps them equal: importing the
projection would add half a second to every pod's start)."""
POLL_INTERVAL = 0.2
"""Seconds between two asks: an SVID arrives within milliseconds of the pod's ADD, so this bounds the delay."""


def add_parser(roles: Any) -> None:
    """Add `aether identity-ready` to the root parser's subparsers `roles`."""
    parser = roles.add_parser("identity-ready", help=summary("identity-ready"))
    how = parser.add_mutually_exclusive_group()
    how.add_argument(
        "--admin",
        type=Path,
        default=DEFAULT_ADMIN_SOCKET,
        metavar="PATH",
        help="ask the node agent's admin socket (the default)",
    )
    how.add_argument(
        "--inbound",
        nargs="?",
        const="",
        metavar="HOST:PORT",
        help=f"check the certificate the pod's mesh inbound serves (default $POD_IP:{MESH_INBOUND_PORT})",
    )
    parser.add_argument(
        "--namespace", default=os.environ.get("POD_NAMESPACE", ""), help="default: $POD_NAMESPACE"
    )
    parser.add_argument("--pod", default=os.environ.get("POD_NAME", ""), help="default: $POD_NAME")
    parser.add_argument(
        "--service-account",
        default=os.environ.get("POD_SERVICE_ACCOUNT", ""),
        help="with --inbound: the pod's service account (default: $POD_SERVICE_ACCOUNT)",
    )
    parser.add_argument(
        "--trust-domain", default="", help="with --inbound: the SVID's trust domain (default: any)"
    )
    parser.add_argument(
        "--bundle",
        type=Path,
        metavar="FILE",
        help="with --inbound: the trust bundle (PEM) the served chain must verify against (default: not verified)",
    )
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


def inbound_address(text: str, *, environ: dict[str, str] | None = None) -> tuple[str, int]:
    """Return (host, port) of `--inbound`'s value: `HOST:PORT`, `[V6]:PORT`, or '' for `$POD_IP` (else
    127.0.0.1) and the mesh inbound port.

    Raises:
        ValueError: The value is neither (named in the message).
    """
    if not text:
        pod_ip = (os.environ if environ is None else environ).get("POD_IP", "")
        return pod_ip or "127.0.0.1", MESH_INBOUND_PORT
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"--inbound: expected HOST:PORT such as 10.0.0.7:{MESH_INBOUND_PORT} (got {text!r})")
    return host, int(port)


def _inbound_check(arguments: argparse.Namespace) -> Callable[[], str | None] | str:
    """The `--inbound` check of the pod, or the usage error."""
    # Imported here: only this form needs TLS and certificates (a quarter second at every pod's start).
    from aether.core.validation import trust_domain_problem
    from aether.identity.served import (
        ServedCertificateError,
        fetch_served_certificate,
        served_certificate_problem,
    )

    if not arguments.service_account:
        return "give --service-account (or set POD_SERVICE_ACCOUNT) with --inbound"
    if arguments.trust_domain and (problem := trust_domain_problem(arguments.trust_domain)):
        return f"--trust-domain: {problem}"
    try:
        host, port = inbound_address(arguments.inbound)
    except ValueError as exc:
        return str(exc)
    try:
        bundle = None if arguments.bundle is None else arguments.bundle.read_bytes()
    except OSError as exc:
        return f"--bundle: cannot read {str(arguments.bundle)!r}: {exc.strerror or exc}"

    def check() -> str | None:
        try:
            der = fetch_served_certificate(host, port, bundle_pem=bundle)
        except ServedCertificateError as exc:
            return str(exc)
        return served_certificate_problem(
            der,
            namespace=arguments.namespace,
            service_account=arguments.service_account,
            trust_domain=arguments.trust_domain,
            now=datetime.datetime.now(datetime.UTC),
        )

    return check


def _admin_check(arguments: argparse.Namespace, pod: str) -> Callable[[], str | None]:
    def check() -> str | None:
        try:
            return pod_identity_reason(fetch_admin(arguments.admin, IDENTITY_DOCUMENT), pod)
        except (OSError, ValueError) as exc:
            return f"cannot ask the node agent at {str(arguments.admin)!r}: {exc}"

    return check


def run_identity_ready(arguments: argparse.Namespace) -> int:
    """`aether identity-ready`: 0 once served, 1 with the reason after the timeout, 2 for a usage error."""
    if not arguments.namespace or not arguments.pod:
        print(
            "aether: error: give --namespace and --pod (or set POD_NAMESPACE and POD_NAME)", file=sys.stderr
        )
        return 2
    pod = f"{arguments.namespace}/{arguments.pod}"
    check = _admin_check(arguments, pod) if arguments.inbound is None else _inbound_check(arguments)
    if isinstance(check, str):
        print(f"aether: error: {check}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + arguments.timeout
    while True:
        reason = check()
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
