"""Services without a selector route to their EndpointSlices, verified by traffic through a real Envoy at the edge.

A manual Service (no selector) has two EndpointSlices a user wrote, pointing at test backends on loopback: two
HTTP/1.1 backends on ports of their own (targetPort by name: each slice names the Service port `http`), and one
whose endpoint is not ready. A headless Service's slice points at an h2c backend (appProtocol
`kubernetes.io/h2c`). Rendered for the edge (identity none) into a static bootstrap, as `aether render --edge`
does: requests reach exactly the ready addresses, in plaintext, over the protocol the Service port names.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

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
from aether.testing.h2c_upstream import open_h2c_upstream
from aether.testing.xds_resources import pick_free_port
from tests.integration.test_routing_traffic import (
    EDGE_ADDRESS,
    LOOPBACK,
    Edge,
    free_port,
    gateway_manifests,
    open_client,
)

pytestmark = pytest.mark.slow

HTTP1_BACKENDS = ("legacy-a", "legacy-b", "legacy-not-ready")
"""HTTP/1.1 backends on 127.0.0.1 (each on a port of its own); the last one's endpoint is not ready."""
REQUESTS = 200
"""Requests to the manual Service: each of its two ready backends gets one with probability 1/2, so one getting
none has probability 2 * 2**-200 (never)."""


def _manifests(port: int, ports: dict[str, int]) -> str:
    return f"""\
apiVersion: v1
kind: Service
metadata: {{name: legacy, namespace: shop}}
spec: {{ports: [{{name: http, port: 80, targetPort: web}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: legacy-1, namespace: shop, labels: {{kubernetes.io/service-name: legacy}}}}
addressType: IPv4
ports: [{{name: http, port: {ports["legacy-a"]}}}]
endpoints:
- addresses: [{LOOPBACK}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: legacy-2, namespace: shop, labels: {{kubernetes.io/service-name: legacy}}}}
addressType: IPv4
ports: [{{name: http, port: {ports["legacy-b"]}}}]
endpoints:
- addresses: [{LOOPBACK}]
  conditions: {{ready: true}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: legacy-3, namespace: shop, labels: {{kubernetes.io/service-name: legacy}}}}
addressType: IPv4
ports: [{{name: http, port: {ports["legacy-not-ready"]}}}]
endpoints:
- addresses: [{LOOPBACK}]
  conditions: {{ready: false}}
---
apiVersion: v1
kind: Service
metadata: {{name: grpc-headless, namespace: shop}}
spec: {{clusterIP: None, ports: [{{name: grpc, port: 50051, appProtocol: kubernetes.io/h2c}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: grpc-headless-1, namespace: shop, labels: {{kubernetes.io/service-name: grpc-headless}}}}
addressType: IPv4
ports: [{{name: grpc, port: {ports["h2c"]}}}]
endpoints:
- addresses: [{LOOPBACK}]
---
{gateway_manifests(port)}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: legacy, namespace: shop}}
spec:
  parentRefs: [{{name: edge, namespace: default}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /legacy}}}}]
    backendRefs: [{{name: legacy, port: 80}}]
  - matches: [{{path: {{type: PathPrefix, value: /headless}}}}]
    backendRefs: [{{name: grpc-headless, port: 50051}}]
  - matches: [{{path: {{type: PathPrefix, value: /no-such-port}}}}]
    backendRefs: [{{name: legacy, port: 81}}]
"""


@asynccontextmanager
async def open_slices_edge(tmp_path: Path) -> AsyncIterator[Edge]:
    """Render the manifests for the edge (identity none) and run Envoy on them, with every backend."""
    port = free_port()
    ports = {name: pick_free_port() for name in (*HTTP1_BACKENDS, "h2c")}
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "slices.yaml").write_text(_manifests(port, ports))
    request = RenderRequest(manifests=manifests, edge=True, identity=Identity.NONE, bind=EDGE_ADDRESS)
    snapshot = render_snapshot(render_state(ManifestDirectory.read(manifests)), request)
    async with AsyncExitStack() as stack:
        for name in HTTP1_BACKENDS:
            await stack.enter_async_context(open_http_upstream(name=name, host=LOOPBACK, port=ports[name]))
        h2c = await stack.enter_async_context(open_h2c_upstream(name="h2c", host=LOOPBACK, port=ports["h2c"]))
        await stack.enter_async_context(
            open_envoy(
                bootstrap_document(snapshot, admin=(LOOPBACK, 0)),
                work_dir=tmp_path / "envoy",
                log_level="warning",
            )
        )
        yield Edge(port=port, backends={"h2c": h2c})


async def test_services_without_a_selector_reach_the_ready_addresses_of_their_endpoint_slices(
    tmp_path: Path,
) -> None:
    """The manual Service's requests land on both ready slice backends (HTTP/1.1) and never on the not-ready one;
    the headless Service's reach its h2c backend; a Service port the Service lacks answers 500 (unresolved)."""
    async with open_slices_edge(tmp_path) as edge, open_client(edge) as client:
        legacy = collections.Counter(
            [await client.landed("/legacy", host="legacy.example") for _ in range(REQUESTS)]
        )
        headless = {await client.landed("/headless", host="legacy.example") for _ in range(5)}
        missing = {await client.landed("/no-such-port", host="legacy.example") for _ in range(3)}
    assert set(legacy) == {"legacy-a", "legacy-b"}
    assert headless == {"h2c"}
    assert missing == {"<500>"}
