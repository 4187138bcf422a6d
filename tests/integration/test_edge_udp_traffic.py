"""UDP at the edge, verified by traffic: a Gateway's UDP listener and its UDPRoute rendered as `aether render --edge`
does (identity none) into a static bootstrap, a real Envoy on it, and UDP echo servers as the pods of two Services
(one service account, two versions): datagrams are split by the route's weights, each session's answers come from
the listener's own address, and only the pods the Services select answer.
"""

from __future__ import annotations

import collections
import socket
from pathlib import Path

import pytest
import trio

from aether.cli.render_command import (
    Identity,
    RenderRequest,
    bootstrap_document,
    render_snapshot,
    render_state,
)
from aether.envoy.process import open_envoy
from aether.kube.manifests import ManifestDirectory
from aether.testing.envoy import wait_for
from tests.integration.test_mesh_selection_traffic import binomial_bounds
from tests.integration.test_routing_traffic import free_port

pytestmark = pytest.mark.slow

LOOPBACK = "127.0.0.1"
EDGE_ADDRESS = "127.0.33.1"
"""Where the edge's listeners bind: an address of its own, so its fixed readiness port meets no other test."""
PODS = {"dns-0": ("127.0.33.2", "v1"), "dns-1": ("127.0.33.3", "v2"), "dns-2": ("127.0.33.4", "v3")}
"""Pod → (its IP, its `version` label); all run as the service account `dns`. No Service selects v3."""
SESSIONS = 400
V2_SHARE = 0.25
FAILURE_PROBABILITY = 1e-9
EXCHANGE_TIMEOUT = 5.0


def _manifests(*, listener_port: int, pod_port: int) -> str:
    pods = "---\n".join(
        f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: dns, labels: {{app: dns, version: {version}, aether.io/managed: "true"}}}}
spec: {{serviceAccountName: dns, nodeName: node-a}}
status: {{podIP: {ip}}}
"""
        for name, (ip, version) in PODS.items()
    )
    services = "---\n".join(
        f"""\
apiVersion: v1
kind: Service
metadata: {{name: dns-{version}, namespace: dns}}
spec: {{selector: {{app: dns, version: {version}}}, ports: [{{port: 53, targetPort: {pod_port}, protocol: UDP}}]}}
"""
        for version in ("v1", "v2")
    )
    return f"""\
{pods}---
{services}---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: aether}}
spec: {{controllerName: gateway.aether.io/edge}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: dns}}
spec:
  gatewayClassName: aether
  listeners:
  - {{name: dns, port: {listener_port}, protocol: UDP}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {{name: dns, namespace: dns}}
spec:
  parentRefs: [{{name: edge}}]
  rules:
  - backendRefs: [{{name: dns-v1, port: 53, weight: 3}}, {{name: dns-v2, port: 53, weight: 1}}]
"""


async def _serve(server: trio.socket.SocketType, tag: bytes) -> None:
    while True:
        data, peer = await server.recvfrom(512)
        await server.sendto(tag + b":" + data, peer)


async def _exchange(port: int) -> bytes:
    """One session: a new connected socket (so a new source port), one datagram, its answer."""
    with trio.socket.socket(type=socket.SOCK_DGRAM) as client, trio.fail_after(EXCHANGE_TIMEOUT):
        await client.connect((EDGE_ADDRESS, port))
        await client.send(b"ping")
        return bytes(await client.recv(512))


async def test_a_udp_listener_splits_sessions_by_weight_between_the_pods_its_backends_select(
    tmp_path: Path,
) -> None:
    """400 sessions: answered by v1's and v2's pods only (never v3's, of the same account), v2's count within the
    exact binomial bounds of 25% (p = 1e-9), each answer from the listener's address (a connected socket)."""
    listener_port = free_port(EDGE_ADDRESS)
    pod_port = free_port(LOOPBACK)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "dns.yaml").write_text(_manifests(listener_port=listener_port, pod_port=pod_port))
    request = RenderRequest(manifests=manifests, edge=True, identity=Identity.NONE, bind=EDGE_ADDRESS)
    snapshot = render_snapshot(render_state(ManifestDirectory.read(manifests)), request)
    bootstrap = bootstrap_document(snapshot, admin=(LOOPBACK, 0))
    servers = {}
    for ip, version in PODS.values():
        servers[version] = trio.socket.socket(type=socket.SOCK_DGRAM)
        await servers[version].bind((ip, pod_port))

    async def answered() -> bool:
        try:
            return (await _exchange(listener_port)).startswith((b"v1:", b"v2:"))
        except (trio.TooSlowError, ConnectionRefusedError):
            return False

    with servers["v1"], servers["v2"], servers["v3"]:
        async with trio.open_nursery() as nursery:
            for version, server in servers.items():
                nursery.start_soon(_serve, server, version.encode())
            async with open_envoy(bootstrap, work_dir=tmp_path / "envoy", log_level="warning"):
                await wait_for(answered, timeout=20)
                answers = collections.Counter(
                    [(await _exchange(listener_port)).split(b":")[0] for _ in range(SESSIONS)]
                )
            nursery.cancel_scope.cancel()
    assert set(answers) <= {b"v1", b"v2"}, answers
    low, high = binomial_bounds(SESSIONS, V2_SHARE, failure=FAILURE_PROBABILITY)
    assert low <= answers[b"v2"] <= high, (answers, (low, high))
