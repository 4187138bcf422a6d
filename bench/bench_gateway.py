"""Gateway API projection: the view of 100, 1,000 and 5,000 HTTPRoutes from scratch, against the incremental view
after one route changes; the view's routes spelled as Envoy messages (what the projections add); the edge's Envoy
snapshot from scratch (`edge_snapshot`) against the edge projector's after one route changes; route table bytes;
peak memory.

The workload follows Envoy Gateway's scale benchmark: one Gateway listener, routes spread over 5 hostnames, each
route one rule (a path prefix, a header match on every other route) to one of 100 Services; a tenth of the routes
are GAMMA routes on those Services. The reference of the incremental figure is the full view of the same state,
measured in the same run. Each size runs in its own process, so its peak RSS is its own.

Anchor: Envoy Gateway's control plane peaks at 263 MiB with 1,000 HTTPRoutes.
Aims (issue 21, target 7): 10,000 HTTPRoutes in <= 1 s from scratch and <= 5 ms incrementally, with <= 150 MB RSS;
1,000 HTTPRoutes <= 1 ms incrementally. Times are CPU time of the process (the machine is shared: wall-clock is
noise), the full view's best of 3, each after the core's caches are emptied (`cold_caches`: from scratch means
cold); (first) is the process's first view, which runs the collector policy's first full collection
(`aether.plane.collector`: every projection runs under it, as in the controller and the plane).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import write_results
from bench_projection import rss_mb

from aether.core.events import Event, Record
from aether.core.events.kube import KubeObject, KubeService, ObjectMeta, ServicePort
from aether.core.gateway import GatewayProjector, GatewayView
from aether.core.project.edge import EdgeOptions, edge_snapshot
from aether.core.project.edge_projector import EdgeProjector
from aether.core.project.gateway_routes import envoy_route_list, envoy_virtual_host
from aether.core.reduce import fold_all
from aether.core.reduce.kube import canonical_json
from aether.core.snapshot import Snapshot
from aether.core.state import EMPTY_STATE, State
from aether.plane.collector import collector_deferred
from aether.testing import builders
from aether.testing.gateway_objects import edge_gateway_events

SIZES = (100, 1_000, 5_000, 10_000)
SERVICES = 100
HOSTNAMES = 5
CHANGES = 50
"""Single-route changes viewed incrementally at each size (the median is reported). The edge snapshot's figure is
the median over those of edge routes (the others leave its route table as it was)."""


def _route(index: int, *, version: int = 0) -> KubeObject:
    """Route `index` (its path changes with `version`)."""
    service = f"svc{index % SERVICES}"
    gamma = index % 10 == 9
    parents = (
        [{"group": "", "kind": "Service", "name": service, "port": 80}]
        if gamma
        else [{"name": "edge", "namespace": "edge"}]
    )
    match: dict[str, object] = {"path": {"type": "PathPrefix", "value": f"/route{index}/v{version}"}}
    if index % 2:
        match["headers"] = [{"name": "x-tenant", "value": f"t{index % 7}"}]
    spec = {
        "parentRefs": parents,
        "hostnames": [f"host{index % HOSTNAMES}.example.com"],
        "rules": [
            {"matches": [match], "backendRefs": [{"name": f"svc{(index + 1) % SERVICES}", "port": 80}]}
        ],
    }
    meta = ObjectMeta(
        kind="HTTPRoute",
        namespace=f"ns{index % 10}",
        name=f"route{index}",
        generation=version + 1,
        creation_timestamp=f"2024-01-01T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z",
    )
    return KubeObject(meta=meta, spec_json=canonical_json(spec))


def gateway_state(routes: int) -> State:
    """The edge's class and Gateway, the Services (in every route namespace), and `routes` HTTPRoutes."""
    events: list[Event] = edge_gateway_events()
    for namespace in range(10):
        for service in range(SERVICES):
            meta = ObjectMeta(kind="Service", namespace=f"ns{namespace}", name=f"svc{service}")
            events.append(
                builders.kube_service_upserted(
                    KubeService(meta=meta, selector={"app": meta.name}, ports=[ServicePort(port=80)])
                )
            )
    events.extend(builders.gateway_object_upserted(_route(index)) for index in range(routes))
    return fold_all(EMPTY_STATE, [Record(seq=seq, event=event) for seq, event in enumerate(events, 1)])


def envoy_routes(view: GatewayView) -> list[Any]:
    """Every virtual host and every mesh service's routes, as the projections spell them for Envoy."""
    messages = [
        envoy_virtual_host(vhost) for listener in view.edge_listeners for vhost in listener.virtual_hosts
    ]
    messages.extend(
        route
        for routing in view.mesh_routes.values()
        for route in envoy_route_list(routing.all_routes, mesh=True)
    )
    return messages


def route_bytes(view: GatewayView) -> int:
    """The serialized size of every virtual host and every mesh service's routes."""
    return sum(message.ByteSize() for message in envoy_routes(view))


def deferred_view(projector: GatewayProjector, state: State) -> GatewayView:
    """`projector.view(state)` as the controller and the plane run a projection: under the process's collector
    policy (`aether.plane.collector.collector_deferred`; its full collections included)."""
    with collector_deferred():
        return projector.view(state)


EDGE = EdgeOptions()
"""The edge's options in every figure (the defaults: mTLS to the backends)."""


def deferred_edge(projector: EdgeProjector, view: GatewayView, state: State) -> Snapshot:
    """`projector.project(view, state)` under the collector policy, as the plane's publisher runs it."""
    with collector_deferred():
        return projector.project(view, state)


def deferred_edge_snapshot(view: GatewayView, state: State) -> Snapshot:
    """`edge_snapshot(view, state)` from scratch under the collector policy."""
    with collector_deferred():
        return edge_snapshot(view, state, node_id="edge", options=EDGE)


def cold_caches() -> None:
    """Empty every `functools` cache of the pure core, so a "from scratch" figure pays for what it parses: the Gateway
    parse and entries share equal values through process-wide caches, which a view after the first would find warm."""
    for name, module in list(sys.modules.items()):
        if name.startswith("aether.core.") and module is not None:
            for value in vars(module).values():
                if not isinstance(value, type) and callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def _cpu(work: Callable[[], object]) -> float:
    """Return the CPU seconds of this process that `work` took."""
    start = time.process_time()
    work()
    return time.process_time() - start


def measure(routes: int) -> dict[str, float]:
    """Return the figures at `routes` HTTPRoutes (run in a process of its own)."""
    state = gateway_state(routes)
    fulls = []
    for _ in range(3):
        cold_caches()
        fulls.append(_cpu(lambda: deferred_view(GatewayProjector(), state)))
    full = min(fulls)
    projector = GatewayProjector()
    view = deferred_view(projector, state)
    assert sum(len(vhost.routes) for listener in view.edge_listeners for vhost in listener.virtual_hosts) > 0
    size = route_bytes(view)
    spell = min(_cpu(lambda: envoy_routes(view)) for _ in range(3))
    edge_fulls = []
    for _ in range(3):
        cold_caches()
        edge_fulls.append(_cpu(lambda: deferred_edge_snapshot(view, state)))
    edge_full = min(edge_fulls)
    edge = EdgeProjector(node_id="edge", options=EDGE)
    deferred_edge(edge, view, state)
    samples, edge_samples = [], []
    for step in range(CHANGES):
        index = (step * 7919) % routes
        event = builders.gateway_object_upserted(_route(index, version=step + 1))
        state = fold_all(state, [Record(seq=state.seq + 1, event=event)])
        views: list[GatewayView] = []
        samples.append(_cpu(lambda: views.append(deferred_view(projector, state))))  # noqa: B023 (called at once)
        assert projector.statistics().resolved == 1
        took = _cpu(lambda: deferred_edge(edge, views[0], state))  # noqa: B023 (called at once)
        done = edge.statistics()
        if index % 10 == 9:  # a GAMMA route: the edge's tables stay as they were
            assert (done.routes_serialized, done.tables_built) == (0, 0), done
        else:  # one route of one virtual host serialized, the table assembled again
            assert (done.routes_serialized, done.tables_built, done.upserted) == (1, 1, 1), done
            edge_samples.append(took)
    incremental = statistics.median(samples)
    _, peak = rss_mb()
    return {
        "full_ms": full * 1e3,
        "first_ms": fulls[0] * 1e3,
        "envoy_ms": spell * 1e3,
        "incremental_ms": incremental * 1e3,
        "incremental_best_ms": min(samples) * 1e3,
        "edge_full_ms": edge_full * 1e3,
        "edge_incremental_ms": statistics.median(edge_samples) * 1e3,
        "edge_incremental_best_ms": min(edge_samples) * 1e3,
        "ratio": full / incremental,
        "route_mb": size / 1e6,
        "peak_rss_mb": peak,
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--size":
        print(json.dumps(measure(int(sys.argv[2]))))
        return
    print(
        f"Gateway API view: {HOSTNAMES} hostnames, {SERVICES} services, a tenth GAMMA; full = best of 3,"
        f" incremental = median of {CHANGES} single-route changes; each size in its own process"
    )
    print(
        f"  {'routes':>7} {'full':>11} {'(first)':>11} {'as Envoy':>11} {'incremental':>12} {'(best)':>9} {'full/incr':>10}"
        f" {'routes':>9} {'peak RSS':>9}"
    )
    figures: dict[str, float] = {}
    rows: list[tuple[int, dict[str, float]]] = []
    for routes in SIZES:
        output = subprocess.run(
            [sys.executable, str(Path(__file__)), "--size", str(routes)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        row = json.loads(output.splitlines()[-1])
        print(
            f"  {routes:>7,} {row['full_ms']:>8.1f} ms {row['first_ms']:>8.1f} ms {row['envoy_ms']:>8.1f} ms {row['incremental_ms']:>9.2f} ms"
            f" {row['incremental_best_ms']:>6.2f} ms"
            f" {row['ratio']:>9.0f}x {row['route_mb']:>6.2f} MB {row['peak_rss_mb']:>6.0f} MB"
        )
        figures.update({f"{key}_{routes}_routes": round(value, 3) for key, value in row.items()})
        rows.append((routes, row))
    print(
        "Edge snapshot (Envoy resources of the edge): from scratch (`edge_snapshot`, best of 3) and the edge"
        " projector after one edge route changed (median / best); reference: the view's routes as Envoy messages"
    )
    print(
        f"  {'routes':>7} {'as Envoy':>11} {'edge full':>11} {'one route changed':>18} {'(best)':>9} {'full/incr':>10}"
    )
    for routes, row in rows:
        print(
            f"  {routes:>7,} {row['envoy_ms']:>8.1f} ms {row['edge_full_ms']:>8.1f} ms"
            f" {row['edge_incremental_ms']:>15.2f} ms {row['edge_incremental_best_ms']:>6.2f} ms"
            f" {row['edge_full_ms'] / row['edge_incremental_ms']:>9.0f}x"
        )
    full, incremental, peak = (
        figures[f"{key}_10000_routes"] for key in ("full_ms", "incremental_ms", "peak_rss_mb")
    )
    small = figures["incremental_ms_1000_routes"]
    print("  anchor: Envoy Gateway's control plane peaks at 263 MiB with 1,000 HTTPRoutes")
    for text, value, aim, unit in (
        ("10,000 HTTPRoutes from scratch", full, 1000, "ms"),
        ("10,000 HTTPRoutes, one route changed", incremental, 5, "ms"),
        ("1,000 HTTPRoutes, one route changed", small, 1, "ms"),
        ("peak RSS at 10,000 HTTPRoutes", peak, 150, "MB"),
        (
            "edge snapshot at 10,000 HTTPRoutes, one route changed",
            figures["edge_incremental_ms_10000_routes"],
            5,
            "ms",
        ),
    ):
        print(f"  aim: {text} <= {aim} {unit}: {'met' if value <= aim else 'NOT met'} ({value:.2f} {unit})")
    write_results("gateway", figures)


if __name__ == "__main__":
    sys.exit(main())
