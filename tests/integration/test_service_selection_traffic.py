"""A backendRef reaches exactly the pods its Service selects, verified by traffic through a real Envoy.

The canary: v1 and v2 pods all run as the service account `default` (one identity, one cluster), two Services
select `version: v1` and `version: v2`, and a route splits 90/10. Manifests are rendered for the edge (identity
none) into a static bootstrap, as `aether render --edge --identity none` does; the pods are h2c backends at
127.0.32.x answering with their own name.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Mapping, Sequence
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
from aether.envoy.process import open_envoy
from aether.kube.manifests import ManifestDirectory
from aether.testing.h2c_upstream import open_h2c_upstream
from tests.integration.test_routing_traffic import (
    EDGE_ADDRESS,
    LOOPBACK,
    MESH_INBOUND,
    Client,
    Edge,
    free_port,
    open_client,
)

pytestmark = pytest.mark.slow

PODS = {
    "checkout-v1-0": ("127.0.32.1", "v1"),
    "checkout-v1-1": ("127.0.32.2", "v1"),
    "checkout-v2-0": ("127.0.32.3", "v2"),
}
"""Pod name → (pod IP, its `version` label); every pod runs as the service account `default`."""
REQUESTS = 1_000
TOLERANCE = 0.05
"""Absolute tolerance on the v2 share: at n = 1,000 and p = 0.1 the standard deviation is ~0.0095, so five of them."""


def canary_objects(
    pods: Mapping[str, tuple[str, str]],
    services: Sequence[tuple[str, str]],
    *,
    service_account: str = "default",
) -> str:
    """The canary's objects in namespace shop: `pods` (name → (pod IP, `version` label)), all of `app: checkout`
    and one service account, on node-a; and `services` (name, selector in YAML flow style), each with port 80
    targeting 8080."""
    pod_documents = "---\n".join(
        f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: shop, labels: {{app: checkout, version: {version}, aether.io/managed: "true"}}}}
spec: {{serviceAccountName: {service_account}, nodeName: node-a}}
status: {{podIP: {ip}}}
"""
        for name, (ip, version) in pods.items()
    )
    service_documents = "---\n".join(
        f"""\
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: shop}}
spec: {{selector: {selector}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}
"""
        for name, selector in services
    )
    return f"{pod_documents}---\n{service_documents}"


def _manifests(port: int) -> str:
    objects = canary_objects(
        PODS,
        (
            ("checkout-v1", "{app: checkout, version: v1}"),
            ("checkout-v2", "{app: checkout, version: v2}"),
            ("checkout-v3", "{app: checkout, version: v3}"),
            ("checkout", "{app: checkout}"),
        ),
    )
    return f"""\
{objects}---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: aether}}
spec: {{controllerName: gateway.aether.io/edge}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: shop}}
spec:
  gatewayClassName: aether
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: checkout, namespace: shop}}
spec:
  parentRefs: [{{name: edge}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /split}}}}]
    backendRefs: [{{name: checkout-v1, port: 80, weight: 90}}, {{name: checkout-v2, port: 80, weight: 10}}]
  - matches: [{{path: {{type: PathPrefix, value: /v1}}}}]
    backendRefs: [{{name: checkout-v1, port: 80}}]
  - matches: [{{path: {{type: PathPrefix, value: /v3}}}}]
    backendRefs: [{{name: checkout-v3, port: 80}}]
  - matches: [{{path: {{type: PathPrefix, value: /all}}}}]
    backendRefs: [{{name: checkout, port: 80}}]
"""


@asynccontextmanager
async def open_canary(tmp_path: Path) -> AsyncIterator[Edge]:
    """Render the canary for the edge (identity none) and run Envoy on it, with every pod's backend."""
    port = free_port()
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "canary.yaml").write_text(_manifests(port))
    request = RenderRequest(manifests=manifests, edge=True, identity=Identity.NONE, bind=EDGE_ADDRESS)
    snapshot = render_snapshot(render_state(ManifestDirectory.read(manifests)), request)
    async with AsyncExitStack() as stack:
        backends = {
            name: await stack.enter_async_context(open_h2c_upstream(name=name, host=ip, port=MESH_INBOUND))
            for name, (ip, _) in PODS.items()
        }
        await stack.enter_async_context(
            open_envoy(
                bootstrap_document(snapshot, admin=(LOOPBACK, 0)),
                work_dir=tmp_path / "envoy",
                log_level="warning",
            )
        )
        yield Edge(port=port, backends=backends)


async def _landings(client: Client, path: str, count: int) -> collections.Counter[str]:
    return collections.Counter([await client.landed(path, host="checkout.example") for _ in range(count)])


async def test_a_canary_of_two_services_sharing_a_service_account_splits_over_the_pods_each_selects(
    tmp_path: Path,
) -> None:
    """The 90/10 split lands on v1 pods about 90% and on the v2 pod about 10%; Service v1 never reaches the v2
    pod; a Service selecting no pod answers 503 (never another Service's pods); the Service selecting every
    version reaches all three."""
    async with open_canary(tmp_path) as edge, open_client(edge) as client:
        split = await _landings(client, "/split", REQUESTS)
        only_v1 = await _landings(client, "/v1", 200)
        none = await _landings(client, "/v3", 20)
        every = await _landings(client, "/all", 300)
    assert set(split) == set(PODS)
    assert abs(split["checkout-v2-0"] / REQUESTS - 0.1) < TOLERANCE
    assert set(only_v1) == {"checkout-v1-0", "checkout-v1-1"}
    assert set(none) == {"<503>"}
    assert set(every) == set(PODS)
