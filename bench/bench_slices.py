"""EndpointSlices: the node's cost of one slice change, against a full projection of the same state.

A caller pod on the node routes (N GAMMA HTTPRoutes on its upstream's Service, one rule each) to N Services without a selector,
each with one EndpointSlice of 10 addresses. One slice change (an address replaced) is projected incrementally by a
long-running `NodeProjector`; the reference is `project_node` of the same state, measured in the same run. The
incremental cost should not grow with N beyond the per-Service walk of the routed slice clusters.

    python bench/bench_slices.py            # N = 100 and 1,000
    python bench/bench_slices.py 50 200     # other sizes
"""

from __future__ import annotations

import statistics
import sys
import time

from _common import best_of, timed, write_results

from aether.core.events import Event, Record
from aether.core.events.kube import KubeObject, ObjectMeta
from aether.core.project import NodeProjector, project_node
from aether.core.reduce import fold, fold_all
from aether.core.reduce.kube import canonical_json
from aether.core.snapshot import CLUSTER_TYPE
from aether.core.state import EMPTY_STATE, State
from aether.testing import builders

NODE = "node-a"
AT = builders.AT
CHANGES = 30
"""Single-slice changes projected incrementally at each size (the median is reported)."""


def _slice(index: int, *, version: int = 0) -> Event:
    addresses = tuple(f"192.0.{index % 250}.{1 + (replica + version) % 250}" for replica in range(10))
    item = builders.make_endpoint_slice(
        f"legacy{index}-1", namespace="default", service=f"legacy{index}", addresses=addresses
    )
    return builders.endpoint_slice_upserted(item)


def _state(services: int) -> State:
    client = builders.make_pod(
        "client-0",
        service_account="client",
        node_name=NODE,
        ips=("10.0.0.5",),
        annotations={"config.aether.io/upstreams": "web"},
    )
    routes = [
        KubeObject(
            meta=ObjectMeta(kind="HTTPRoute", namespace="default", name=f"legacy{index}", generation=1),
            spec_json=canonical_json(
                {
                    "parentRefs": [{"group": "", "kind": "Service", "name": "web", "port": 80}],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": f"/legacy{index}"}}],
                            "backendRefs": [{"name": f"legacy{index}", "port": 80}],
                        }
                    ],
                }
            ),
        )
        for index in range(services)
    ]
    events: list[Event] = [
        builders.pod_added(client),
        builders.kube_service_upserted(builders.make_kube_service("web")),
        *(
            builders.kube_service_upserted(builders.make_kube_service(f"legacy{index}", selector={}))
            for index in range(services)
        ),
        *(_slice(index) for index in range(services)),
        *(builders.gateway_object_upserted(route) for route in routes),
    ]
    return fold_all(EMPTY_STATE, (Record(seq=seq, event=event) for seq, event in enumerate(events, 1)))


def measure(services: int) -> dict[str, float]:
    state = _state(services)
    full = best_of(3, lambda: timed(lambda: project_node(state, node_name=NODE, now=AT)))
    projector = NodeProjector(node_name=NODE)
    projector.project(state, now=AT)
    samples = []
    for change in range(1, CHANGES + 1):
        state = fold(state, Record(seq=state.seq + 1, event=_slice(change % services, version=change)))
        start = time.perf_counter()
        projector.project(state, now=AT)
        samples.append(time.perf_counter() - start)
        assert projector.statistics().upserted == 1  # the changed Service's ClusterLoadAssignment alone
    incremental = statistics.median(samples)
    assert len(projector.project(state, now=AT).of_type(CLUSTER_TYPE)) >= services
    return {"full_ms": full * 1e3, "incremental_ms": incremental * 1e3, "ratio": full / incremental}


def main() -> None:
    sizes = [int(value) for value in sys.argv[1:]] or [100, 1_000]
    print(
        f"EndpointSlices: N Services without a selector routed from one node (10 addresses a slice); full ="
        f" project_node, best of 3; incremental = median of {CHANGES} single-slice changes"
    )
    print(f"  {'services':>9} {'full':>11} {'incremental':>12} {'full/incr':>10}")
    figures: dict[str, float] = {}
    for services in sizes:
        row = measure(services)
        print(
            f"  {services:>9,} {row['full_ms']:>8.1f} ms {row['incremental_ms']:>9.2f} ms {row['ratio']:>9.0f}x"
        )
        figures.update({f"{key}_{services}_services": round(value, 3) for key, value in row.items()})
    write_results("slices", figures)


if __name__ == "__main__":
    sys.exit(main())
