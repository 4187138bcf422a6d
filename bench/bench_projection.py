"""Node projection: a full projection at 100, 1,000 and 10,000 services, against the incremental re-projection
after one endpoint change.

Each service of the dependency set has 10 endpoints; the node runs 8 pods of 4 identities, which declare the
services as upstreams (every cluster has one TLS socket presenting its caller's own certificate). The reference of the incremental figure is the
full projection of the same state, measured in the same run. The snapshot's size is the sum of its resources'
serialized bodies; RSS is read after the 10,000-service runs.

Also: the re-projection after a pod of a new service account (and its SVID) joins the node, a new local identity
(issue 21, target 4), with how many services it re-projected (the median of `NEWCOMERS` successive ones): its own
service joins the dependency set, so both route tables change; and a new local identity whose service the pods
already declare (nothing joins the set: its pod's resources and its secrets only).

Every figure is CPU time of this process (`time.process_time`): the machine is shared.

Aims: one endpoint change at 10,000 services re-projected in <= 2 ms (>= 100x cheaper than a full projection),
<= 300 MB RSS, and issue 21's target 4: a new local identity at 10,000 services in <= 10 ms.
"""

from __future__ import annotations

import functools
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import best_of, endpoint_ip, registry_state, service_names, write_results

from aether.core.events import (
    Endpoint,
    EndpointUpdated,
    MeshConfigUpdated,
    Pod,
    PodAdded,
    Record,
    Svid,
    SvidRotated,
    TrustBundle,
    TrustBundleRotated,
)
from aether.core.events.kube import MeshConfig
from aether.core.project import NodeProjector, project_node
from aether.core.reduce import fold_all
from aether.core.state import State
from aether.core.values import Redacted

NODE = "node-a"
ENDPOINTS_PER_SERVICE = 10
PODS = 8
IDENTITIES = 4
CHANGES = 200
"""Endpoint changes re-projected incrementally at each size (the median is reported)."""
NEWCOMERS = 5
"""New local identities re-projected one after the other at each size (the median is reported)."""
NOW = 1_700_000_000_000_000_000
CERT = b"-----BEGIN CERTIFICATE-----\n" + b"A" * 600 + b"\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\n" + b"B" * 200 + b"\n-----END PRIVATE KEY-----\n"


def node_state(services: int) -> State:
    """The registry of `services` x 10 endpoints, plus the node's pods (declaring every service), SVIDs, bundle."""
    state = registry_state(services=services, endpoints_per_service=ENDPOINTS_PER_SERVICE)
    names = service_names(services)
    events = [
        MeshConfigUpdated(observed_at=NOW, source="bench", config=MeshConfig(generation=1)),
        TrustBundleRotated(
            observed_at=NOW,
            source="bench",
            bundle=TrustBundle(trust_domain="aether.internal", bundle_pem=CERT),
        ),
    ]
    for index in range(PODS):
        account = f"client{index % IDENTITIES}"
        upstreams = ",".join(names[index::PODS])
        pod = Pod(
            namespace="bench",
            name=f"client-{index}",
            node_name=NODE,
            service_account=account,
            labels={"aether.io/managed": "true"},
            annotations={"config.aether.io/upstreams": upstreams},
            ips=(f"10.250.0.{index + 1}",),
            netns=f"/var/run/netns/cni-{index}",
        )
        events.append(PodAdded(observed_at=NOW, source="bench", pod=pod))
    for index in range(IDENTITIES):
        svid = Svid(
            spiffe_id=f"spiffe://aether.internal/ns/bench/sa/client{index}",
            cert_chain_pem=CERT,
            private_key=Redacted(KEY),
        )
        events.append(SvidRotated(observed_at=NOW, source="bench", svid=svid))
    records = [Record(seq=state.seq + offset, event=event) for offset, event in enumerate(events, 1)]
    return fold_all(state, records)


@functools.cache
def _names(services: int) -> tuple[str, ...]:
    """The service keys of `services` services, built once: rebuilding 10,000 names per change (outside the timed
    section) churned the allocator and the caches right before each timed projection."""
    return tuple(service_names(services))


def endpoint_change(state: State, step: int, services: int) -> State:
    """Fold one weight change of one endpoint (a prime stride over the services)."""
    index = (step * 7919) % services
    endpoint = Endpoint(
        service=_names(services)[index],
        ip=endpoint_ip(index, step % ENDPOINTS_PER_SERVICE),
        weight=2 + step,
    )
    seq = state.seq + 1
    event = EndpointUpdated(observed_at=NOW, source="bench", version=str(seq), endpoint=endpoint)
    return fold_all(state, [Record(seq=seq, event=event)])


def timed(action: Callable[[], object]) -> float:
    """Return the CPU time `action` took, in seconds."""
    start = time.process_time()
    action()
    return time.process_time() - start


def new_identity(state: State, services: int, index: int = 0, *, known: bool = False) -> State:
    """Fold a pod of a service account the node did not run yet, and its SVID (issue 21, target 4): of a new
    service (which joins the dependency set) or, `known`, of a service already in the set (one the pods declare)."""
    namespace, account = (
        service_names(services)[-1 - index].split("/") if known else ("bench", f"newcomer{index}")
    )
    pod = Pod(
        namespace=namespace,
        name=f"newcomer-{index}",
        node_name=NODE,
        service_account=account,
        labels={"aether.io/managed": "true"},
        annotations={"config.aether.io/upstreams": service_names(services)[index]},
        ips=(f"10.250.1.{index + 1}",),
        netns=f"/var/run/netns/cni-newcomer-{index}",
    )
    svid = Svid(
        spiffe_id=f"spiffe://aether.internal/ns/{namespace}/sa/{account}",
        cert_chain_pem=CERT,
        private_key=Redacted(KEY),
    )
    events = [
        PodAdded(observed_at=NOW, source="bench", pod=pod),
        SvidRotated(observed_at=NOW, source="bench", svid=svid),
    ]
    return fold_all(
        state, [Record(seq=state.seq + offset, event=event) for offset, event in enumerate(events, 1)]
    )


def measure(services: int) -> dict[str, float]:
    """Return the figures at `services` services."""
    state = node_state(services)
    full = best_of(3, lambda: timed(lambda: project_node(state, node_name=NODE, now=NOW)))
    snapshot = project_node(state, node_name=NODE, now=NOW)
    assert len(snapshot.of_type("type.googleapis.com/envoy.config.cluster.v3.Cluster")) >= services
    size = sum(len(item.body) for held in snapshot.resources.values() for item in held.values())
    projector = NodeProjector(node_name=NODE)
    projector.project(state, now=NOW)
    samples = []
    for step in range(CHANGES):
        state = endpoint_change(state, step, services)
        samples.append(timed(lambda state=state: projector.project(state, now=NOW)))
        assert projector.statistics().services_projected == 1
    incremental = statistics.median(samples)
    identities, projected = [], []
    for index in range(NEWCOMERS):
        state = new_identity(state, services, index)
        identities.append(timed(lambda state=state: projector.project(state, now=NOW)))
        projected.append(projector.statistics().services_projected)
    known = []
    for index in range(NEWCOMERS):
        state = new_identity(state, services, index, known=True)
        known.append(timed(lambda state=state: projector.project(state, now=NOW)))
        assert projector.statistics().services_projected == 0
    return {
        "new_identity_ms": statistics.median(identities) * 1e3,
        "new_identity_services_projected": max(projected),
        "new_identity_in_set_ms": statistics.median(known) * 1e3,
        "full_ms": full * 1e3,
        "incremental_ms": incremental * 1e3,
        "incremental_best_ms": min(samples) * 1e3,
        "ratio": full / incremental,
        "snapshot_mb": size / 1e6,
    }


def rss_mb() -> tuple[float, float]:
    """Return (current, peak) resident set size in MB (Linux: /proc/self/status, ru_maxrss in KiB)."""
    current = 0.0
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                current = int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return current, peak


def main() -> None:
    print(
        f"node projection (CPU time): {ENDPOINTS_PER_SERVICE} endpoints per service, {PODS} pods of {IDENTITIES}"
        f" identities; full = best of 3, incremental = median of {CHANGES} endpoint changes, new identity ="
        f" median of {NEWCOMERS}"
    )
    print(
        f"  {'services':>8} {'full':>11} {'incremental':>12} {'(best)':>9} {'full/incr':>10} {'snapshot':>10}"
        f" {'new identity':>13} {'(re-projected)':>15} {'(service in set)':>17}"
    )
    figures: dict[str, float] = {}
    for services in (100, 1_000, 10_000):
        row = measure(services)
        print(
            f"  {services:>8,} {row['full_ms']:>8.1f} ms {row['incremental_ms']:>9.3f} ms {row['incremental_best_ms']:>6.3f} ms"
            f" {row['ratio']:>9.0f}x {row['snapshot_mb']:>7.2f} MB"
            f" {row['new_identity_ms']:>10.1f} ms {int(row['new_identity_services_projected']):>15,}"
            f" {row['new_identity_in_set_ms']:>14.2f} ms"
        )
        figures.update({f"{key}_{services}_services": round(value, 3) for key, value in row.items()})
    current, peak = rss_mb()
    print(f"  RSS after the 10,000-service runs: {current:.0f} MB (peak {peak:.0f} MB)")
    incremental, ratio = figures["incremental_ms_10000_services"], figures["ratio_10000_services"]
    met = incremental <= 2 and ratio >= 100
    print(f"  aim: one endpoint change at 10,000 services <= 2 ms and >= 100x: {'met' if met else 'NOT met'}")
    print(f"  aim: <= 300 MB RSS: {'met' if peak <= 300 else 'NOT met'}")
    identity = figures["new_identity_ms_10000_services"]
    print(
        "  aim (issue 21, target 4): a new local identity at 10,000 services <= 10 ms:"
        f" {'met' if identity <= 10 else 'NOT met'}"
    )
    figures.update({"rss_mb_10000_services": round(current, 1), "peak_rss_mb": round(peak, 1)})
    write_results("projection", figures)


if __name__ == "__main__":
    sys.exit(main())
