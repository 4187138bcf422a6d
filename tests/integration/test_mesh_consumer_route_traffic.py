"""GAMMA MeshConsumerRoute verified by traffic through a real Envoy: an HTTPRoute in the caller's namespace whose
parent is a Service of another namespace reaches that Service without a ReferenceGrant, and changes the requests
of its own namespace's callers only (the node renders as in `test_mesh_ports_traffic`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_mesh_ports_traffic import open_caller, open_mesh

pytestmark = pytest.mark.slow

CONSUMER_IP = "127.0.34.11"
PRODUCER_CALLER_IP = "127.0.34.12"
ECHO_IP = "127.0.34.13"
ECHO = "echo.producer.aether.internal"
MANIFESTS = f"""\
apiVersion: v1
kind: Pod
metadata: {{name: caller-0, namespace: consumer, labels: {{app: caller, aether.io/managed: "true"}},
  annotations: {{config.aether.io/upstreams: producer/echo}}}}
spec: {{serviceAccountName: caller, nodeName: node-a}}
status: {{podIP: {CONSUMER_IP}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: neighbour-0, namespace: producer, labels: {{app: neighbour, aether.io/managed: "true"}},
  annotations: {{config.aether.io/upstreams: echo}}}}
spec: {{serviceAccountName: neighbour, nodeName: node-a}}
status: {{podIP: {PRODUCER_CALLER_IP}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: echo-0, namespace: producer, labels: {{app: echo, aether.io/managed: "true"}}}}
spec: {{serviceAccountName: echo, nodeName: node-a}}
status: {{podIP: {ECHO_IP}}}
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: producer}}
spec: {{selector: {{app: echo}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: consumer-view, namespace: consumer}}
spec:
  parentRefs: [{{group: "", kind: Service, name: echo, namespace: producer}}]
  rules:
  - filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {{set: [{{name: x-header-set, value: set}}]}}
    backendRefs: [{{name: echo, namespace: producer, port: 80}}]
"""


async def test_a_consumer_route_reaches_its_parent_without_a_grant_and_serves_its_namespace_only(
    tmp_path: Path,
) -> None:
    """The consumer namespace's caller reaches echo through the route (its header set, no 500 for want of a
    ReferenceGrant); the producer namespace's caller reaches echo without it."""
    apps = {"echo-0": ECHO_IP}
    async with open_mesh(tmp_path, MANIFESTS, apps=apps, callers=(CONSUMER_IP, PRODUCER_CALLER_IP)):
        async with open_caller(CONSUMER_IP) as consumer:
            response = await consumer.request("/", host=ECHO)
            assert (response.status, response.headers.get("x-upstream-name")) == (200, "echo-0")
            assert response.headers.get("x-header-set") == "set"
        async with open_caller(PRODUCER_CALLER_IP) as neighbour:
            response = await neighbour.request("/", host=ECHO)
            assert (response.status, response.headers.get("x-upstream-name")) == (200, "echo-0")
            assert "x-header-set" not in response.headers
