"""Listener namespace selectors verified by traffic through a real Envoy: `allowedRoutes.namespaces.from: Selector`
matches the labels of Namespace objects read from the manifests, as `aether render --edge` reads them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.integration.test_routing_traffic import EDGE_ADDRESS, Client, free_port, open_edge

pytestmark = pytest.mark.slow


def _manifests(port: int) -> str:
    return f"""\
apiVersion: v1
kind: Namespace
metadata: {{name: default, labels: {{team: shop}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: other, labels: {{team: other}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: selective, namespace: default}}
spec:
  gatewayClassName: aether
  listeners:
  - name: http
    port: {port}
    protocol: HTTP
    allowedRoutes: {{namespaces: {{from: Selector, selector: {{matchLabels: {{team: shop}}}}}}}}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: from-other, namespace: default}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: other}}]
  to: [{{group: "", kind: Service}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: labelled, namespace: default}}
spec:
  parentRefs: [{{name: selective}}]
  hostnames: [labelled.example]
  rules: [{{backendRefs: [{{name: alpha, port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: unlabelled, namespace: other}}
spec:
  parentRefs: [{{name: selective, namespace: default}}]
  hostnames: [other.example]
  rules: [{{backendRefs: [{{name: beta, namespace: default, port: 80}}]}}]
"""


async def test_a_selector_listener_serves_routes_of_namespaces_with_matching_labels_only(
    tmp_path: Path,
) -> None:
    """The route of Namespace default (labelled `team: shop`) reaches its backend; the route of Namespace other
    (labelled `team: other`) is not attached: its host gets 404 and its backend nothing."""
    port = free_port()
    async with open_edge(tmp_path, _manifests(port)) as edge:
        stream = await trio.open_tcp_stream(EDGE_ADDRESS, port)
        async with stream:
            client = Client(stream)
            assert await client.landed("/", host="labelled.example") == "alpha"
            assert await client.landed("/", host="other.example") == "<404>"
        assert not edge.backends["beta"].requests
