"""GAMMA MeshPorts verified by traffic through a real Envoy: a route whose parentRef names Service port 80 applies
to requests for port 80 only, though the Service's port 8080 targets the same pods.

The manifests are rendered for a node in local mode with identity none (`aether render --identity none` with
capture off): the caller dials its pod's HTTP proxy port (`<caller ip>:18081`) with the Host naming the mesh
service and port; the node's inbound listener of the callee (`<callee ip>:18008`) delivers to its application, an
HTTP backend at `<callee ip>:8080` answering with its name.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
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
from aether.demo.upstream import open_http_upstream
from aether.envoy.process import open_envoy
from aether.kube.manifests import ManifestDirectory
from aether.testing.envoy import wait_for
from tests.integration.test_routing_traffic import LOOPBACK, Client

pytestmark = pytest.mark.slow

CALLER_IP = "127.0.34.1"
ECHO_IP = "127.0.34.2"
OUTBOUND_PORT = 18081
APP_PORT = 8080
"""The callee application's port (the default of `endpoint.aether.io/port`): the node's inbound listener at
`<callee ip>:18008` delivers to it."""
ECHO = "echo.default.aether.internal"
MANIFESTS = f"""\
apiVersion: v1
kind: Pod
metadata: {{name: caller-0, namespace: default, labels: {{app: caller, aether.io/managed: "true"}},
  annotations: {{config.aether.io/upstreams: echo}}}}
spec: {{serviceAccountName: caller, nodeName: node-a}}
status: {{podIP: {CALLER_IP}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: echo-0, namespace: default, labels: {{app: echo, aether.io/managed: "true"}}}}
spec: {{serviceAccountName: echo, nodeName: node-a}}
status: {{podIP: {ECHO_IP}}}
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: default}}
spec:
  selector: {{app: echo}}
  ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: alt, port: 8080, targetPort: 8080}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: port-80, namespace: default}}
spec:
  parentRefs: [{{group: "", kind: Service, name: echo, port: 80}}]
  rules:
  - filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: x-header-set, value: v1}}]}}
    backendRefs: [{{name: echo, port: 80}}]
"""


@asynccontextmanager
async def open_mesh(
    tmp_path: Path, manifests: str, *, apps: dict[str, str], callers: tuple[str, ...]
) -> AsyncIterator[None]:
    """Render `manifests` for the node (local mode, identity none), run Envoy on it and an HTTP application per
    pod of `apps` (name → pod IP), until the HTTP proxy port of every pod of `callers` (pod IPs) listens."""
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "mesh.yaml").write_text(manifests)
    request = RenderRequest(manifests=directory, identity=Identity.NONE, capture=False)
    snapshot = render_snapshot(render_state(ManifestDirectory.read(directory), capture=False), request)
    async with AsyncExitStack() as stack:
        for name, ip in apps.items():
            await stack.enter_async_context(open_http_upstream(name=name, host=ip, port=APP_PORT))
        await stack.enter_async_context(
            open_envoy(
                bootstrap_document(snapshot, admin=(LOOPBACK, 0)),
                work_dir=tmp_path / "envoy",
                log_level="warning",
            )
        )
        for ip in callers:
            await wait_for(functools.partial(_listening, ip), timeout=10.0)
        yield


async def _listening(ip: str) -> bool:
    try:
        stream = await trio.open_tcp_stream(ip, OUTBOUND_PORT)
    except OSError:
        return False
    await stream.aclose()
    return True


@asynccontextmanager
async def open_caller(ip: str) -> AsyncIterator[Client]:
    """Connect to the HTTP proxy port of the pod at `ip`."""
    stream = await trio.open_tcp_stream(ip, OUTBOUND_PORT)
    async with stream:
        yield Client(stream)


async def test_a_route_for_service_port_80_applies_to_port_80_only(tmp_path: Path) -> None:
    """The Host without a port (80, HTTP's default) and with `:80` get the route's header; `:8080`, the same pods,
    does not."""
    async with (
        open_mesh(tmp_path, MANIFESTS, apps={"echo-0": ECHO_IP}, callers=(CALLER_IP,)),
        open_caller(CALLER_IP) as client,
    ):
        for host in (ECHO, f"{ECHO}:80"):
            response = await client.request("/", host=host)
            assert (response.status, response.headers.get("x-upstream-name")) == (200, "echo-0")
            assert response.headers.get("x-header-set") == "v1"
        other = await client.request("/", host=f"{ECHO}:8080")
        assert (other.status, other.headers.get("x-upstream-name")) == (200, "echo-0")
        assert "x-header-set" not in other.headers
