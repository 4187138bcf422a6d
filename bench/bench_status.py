"""Gateway API status write-back: how many writes `aether controller` issues, and how soon a route edit's status lands.

Against the test API server (in this process), with N HTTPRoutes (1,000 by default) attached to one Gateway:

1. a first leader writes every status (writes issued, wall time until every route's parent entry is there);
2. it is killed and a second replica takes over, finding every status current: writes issued (the aim is 0, only
   changed statuses are written) and the time until its first full reconcile;
3. E route edits, one at a time (200 by default): from the edit to the route's parent entry carrying the new
   `observedGeneration`, p50/p99.

The reference, in the same run: one GET of a route through the same client (a round trip to the API), p50/p99, and
the edit-to-status latency as a ratio of it. The client and the server share this process's loop, so both figures
include the server's own work.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import trio
from _common import write_results

from aether.controller import ControllerConfig, ElectionTiming, LeaseName, RunningController, serve_controller
from aether.core.gateway import EDGE_CONTROLLER
from aether.kube import GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES, SERVICES, ClusterConfig, KubeClient
from aether.testing.kubeapi import KubeApi, open_kube_api
from aether.testing.kubediscovery import served_resources

TIMING = ElectionTiming(lease_duration=3.0, renew_deadline=2.0, retry_period=0.2)
"""Shorter than client-go's 15/10/2 s so the restart's takeover does not wait 15 s for the killed leader's lease;
long enough that 1,000 writes on a loaded machine do not miss a renewal."""
LEASE = LeaseName(namespace="aether-system", name="aether-controller")
NAMESPACE = "shop"
WAIT = 600.0
"""Seconds any one wait may take before the benchmark fails (a hung controller, not a slow one)."""


def _route(index: int, *, path: str = "/") -> dict[str, Any]:
    return {
        "metadata": {"name": f"route-{index}", "namespace": NAMESPACE},
        "spec": {
            "parentRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "edge", "name": "edge"}
            ],
            "hostnames": [f"r{index}.example"],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                    "backendRefs": [{"name": "web", "port": 80}],
                }
            ],
        },
    }


def _seed(api: KubeApi, routes: int) -> None:
    store = api.store
    store.create(
        GATEWAY_CLASSES, {"metadata": {"name": "aether"}, "spec": {"controllerName": EDGE_CONTROLLER}}
    )
    store.create(
        GATEWAYS,
        {
            "metadata": {"name": "edge", "namespace": "edge"},
            "spec": {
                "gatewayClassName": "aether",
                "listeners": [
                    {
                        "name": "http",
                        "port": 8080,
                        "protocol": "HTTP",
                        "allowedRoutes": {"namespaces": {"from": "All"}},
                    }
                ],
            },
        },
    )
    store.create(
        SERVICES,
        {
            "metadata": {"name": "web", "namespace": NAMESPACE},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}], "clusterIP": "10.96.0.20"},
        },
    )
    for index in range(routes):
        store.create(HTTP_ROUTES, _route(index))


def _observed(api: KubeApi, index: int) -> int:
    """The observedGeneration of our Accepted condition on route `index` (0: none yet)."""
    route = api.store.get(HTTP_ROUTES, name=f"route-{index}", namespace=NAMESPACE) or {}
    for parent in (route.get("status") or {}).get("parents", []):
        if parent.get("controllerName") == EDGE_CONTROLLER:
            for condition in parent.get("conditions", []):
                if condition.get("type") == "Accepted":
                    return int(condition.get("observedGeneration") or 0)
    return 0


async def _until(condition: Any) -> None:
    with trio.fail_after(WAIT):
        while not condition():  # noqa: ASYNC110 - the condition spans the store and the controller
            await trio.sleep(0.002)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def _replica(
    nursery: trio.Nursery, api: KubeApi, identity: str
) -> tuple[RunningController, trio.CancelScope, trio.Event]:
    scope, gone = trio.CancelScope(), trio.Event()

    async def run(task_status: trio.TaskStatus[RunningController]) -> None:
        try:
            with scope:
                client = KubeClient(ClusterConfig.from_url(api.url))
                config = ControllerConfig(identity=identity, lease=LEASE, timing=TIMING)
                await serve_controller(client, config, task_status=task_status)
        finally:
            gone.set()

    return await nursery.start(run), scope, gone


async def measure(routes: int, edits: int) -> dict[str, Any]:
    async with open_kube_api(resources=served_resources()) as api, trio.open_nursery() as nursery:
        _seed(api, routes)
        started = time.perf_counter()
        first, first_scope, first_gone = await _replica(nursery, api, "controller-a")
        await _until(lambda: all(_observed(api, index) == 1 for index in range(routes)))
        initial_seconds = time.perf_counter() - started
        await _until(lambda: first.statistics().synced)
        initial_writes = first.statistics().status_writes
        first_scope.cancel()
        await first_gone.wait()

        started = time.perf_counter()
        second, _, _ = await _replica(nursery, api, "controller-b")
        await _until(lambda: second.statistics().leading and second.statistics().reconciles >= 1)
        restart_seconds = time.perf_counter() - started
        restart_writes = second.statistics().status_writes

        latencies = []
        for step in range(edits):
            index = step % routes
            route = api.store.get(HTTP_ROUTES, name=f"route-{index}", namespace=NAMESPACE)
            assert route is not None
            generation = int(route["metadata"].get("generation") or 1) + 1
            route["spec"] = _route(index, path=f"/v{step}")["spec"]
            edited = time.perf_counter()
            api.store.update(HTTP_ROUTES, route)
            await _until(lambda index=index, generation=generation: _observed(api, index) == generation)
            latencies.append(time.perf_counter() - edited)

        client = KubeClient(ClusterConfig.from_url(api.url))
        round_trips = []
        for step in range(edits):
            sent = time.perf_counter()
            await client.get(HTTP_ROUTES, name=f"route-{step % routes}", namespace=NAMESPACE)
            round_trips.append(time.perf_counter() - sent)
        await client.aclose()
        nursery.cancel_scope.cancel()
    edit_p50, edit_p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    get_p50, get_p99 = _percentile(round_trips, 0.5), _percentile(round_trips, 0.99)
    return {
        "routes": routes,
        "edits": edits,
        "initial_writes": initial_writes,
        "initial_seconds": initial_seconds,
        "restart_writes": restart_writes,
        "restart_reconcile_seconds": restart_seconds,
        "edit_to_status_p50_ms": edit_p50 * 1e3,
        "edit_to_status_p99_ms": edit_p99 * 1e3,
        "edit_to_status_mean_ms": statistics.fmean(latencies) * 1e3,
        "reference_get_p50_ms": get_p50 * 1e3,
        "reference_get_p99_ms": get_p99 * 1e3,
        "edit_p50_over_get_p50": edit_p50 / get_p50,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=1000)
    parser.add_argument("--edits", type=int, default=200)
    arguments = parser.parse_args()
    figures = trio.run(measure, arguments.routes, arguments.edits)
    print(
        f"status write-back, {figures['routes']} routes: first leader {figures['initial_writes']} writes in"
        f" {figures['initial_seconds']:.2f} s; after a restart {figures['restart_writes']} writes, first reconcile"
        f" after {figures['restart_reconcile_seconds']:.2f} s"
    )
    print(
        f"route edit -> status written ({figures['edits']} edits): p50 {figures['edit_to_status_p50_ms']:.1f} ms,"
        f" p99 {figures['edit_to_status_p99_ms']:.1f} ms; reference GET p50 {figures['reference_get_p50_ms']:.2f}"
        f" ms, p99 {figures['reference_get_p99_ms']:.2f} ms; p50 ratio {figures['edit_p50_over_get_p50']:.1f}x"
    )
    write_results("status", figures)


if __name__ == "__main__":
    main()
