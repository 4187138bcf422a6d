"""East-west, a backendRef reaches exactly the pods its Service selects, verified by traffic through a real node Envoy.

The canary of issue 15: v1 and v2 Deployments run as one service account (`checkout`), Services `checkout-v1` and
`checkout-v2` select `version: v1` / `v2`, and an HTTPRoute whose parent is the Service `checkout` splits 90/10
over them. The manifests are rendered for a node in local mode with identity none (`aether render --identity none`
with capture off): the caller dials its pod's HTTP proxy port (`<caller ip>:18081`) with the Host naming the mesh
service and port; the node's inbound listener of each callee (`<pod ip>:18008`) delivers to its application, an
HTTP backend at `<pod ip>:8080` answering with its pod's name.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pytest

from tests.integration.test_mesh_ports_traffic import open_caller, open_mesh
from tests.integration.test_routing_traffic import Client
from tests.integration.test_service_selection_traffic import canary_objects

pytestmark = pytest.mark.slow

CALLER_IP = "127.0.36.1"
PODS = {
    "checkout-v1-0": ("127.0.36.2", "v1"),
    "checkout-v1-1": ("127.0.36.3", "v1"),
    "checkout-v2-0": ("127.0.36.4", "v2"),
}
"""Pod name → (pod IP, its `version` label); every pod runs as the service account `checkout`."""
V1 = {name for name, (_, version) in PODS.items() if version == "v1"}
V2 = {name for name, (_, version) in PODS.items() if version == "v2"}
CHECKOUT = "checkout.shop.aether.internal"
"""The mesh service of every checkout pod (their one service account), which the Service parent routes for."""
REQUESTS = 1_000
V2_SHARE = 0.1
FAILURE_PROBABILITY = 1e-9
"""How unlikely a correct split must be to fail the test: the bounds below are the binomial quantiles for it."""


def binomial_bounds(n: int, p: float, *, failure: float) -> tuple[int, int]:
    """Return `(low, high)`: a Binomial(n, p) count falls below `low` or above `high` with probability at most
    `failure` (each tail at most `failure / 2`, from the exact distribution)."""
    pmf = [
        math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) * p**k * (1 - p) ** (n - k)
        for k in range(n + 1)
    ]
    low, tail = 0, 0.0
    while tail + pmf[low] <= failure / 2:
        tail += pmf[low]
        low += 1
    high, tail = n, 0.0
    while tail + pmf[high] <= failure / 2:
        tail += pmf[high]
        high -= 1
    return low, high


def _manifests() -> str:
    objects = canary_objects(
        PODS,
        (
            ("checkout", "{app: checkout}"),
            ("checkout-v1", "{app: checkout, version: v1}"),
            ("checkout-v2", "{app: checkout, version: v2}"),
        ),
        service_account="checkout",
    )
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: caller-0, namespace: shop, labels: {{app: caller, aether.io/managed: "true"}},
  annotations: {{config.aether.io/upstreams: checkout}}}}
spec: {{serviceAccountName: caller, nodeName: node-a}}
status: {{podIP: {CALLER_IP}}}
---
{objects}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: checkout-canary, namespace: shop}}
spec:
  parentRefs: [{{group: "", kind: Service, name: checkout, port: 80}}]
  rules:
  - backendRefs: [{{name: checkout-v1, port: 80, weight: 90}}, {{name: checkout-v2, port: 80, weight: 10}}]
  - matches: [{{path: {{type: PathPrefix, value: /v1}}}}]
    backendRefs: [{{name: checkout-v1, port: 80}}]
  - matches: [{{path: {{type: PathPrefix, value: /v2}}}}]
    backendRefs: [{{name: checkout-v2, port: 80}}]
"""


async def _landings(client: Client, path: str, count: int) -> collections.Counter[str]:
    return collections.Counter([await client.landed(path, host=CHECKOUT) for _ in range(count)])


async def test_an_east_west_canary_splits_over_the_pods_each_service_selects(tmp_path: Path) -> None:
    """Through the node: the 90/10 split reaches every pod and its v2 count lies within the exact binomial bounds
    (47..162 of 1,000 at a failure probability of 1e-9); Service checkout-v1 reaches only the v1 pods, checkout-v2
    only the v2 pod, though all three are one service account's (one identity, one cluster)."""
    apps = {name: ip for name, (ip, _) in PODS.items()}
    async with (
        open_mesh(tmp_path, _manifests(), apps=apps, callers=(CALLER_IP,)),
        open_caller(CALLER_IP) as client,
    ):
        split = await _landings(client, "/", REQUESTS)
        only_v1 = await _landings(client, "/v1", 100)
        only_v2 = await _landings(client, "/v2", 30)
    assert set(split) == set(PODS), split
    low, high = binomial_bounds(REQUESTS, V2_SHARE, failure=FAILURE_PROBABILITY)
    v2_count = sum(split[name] for name in V2)
    assert low <= v2_count <= high, (v2_count, (low, high), split)
    assert set(only_v1) == V1, only_v1
    assert set(only_v2) == V2, only_v2
