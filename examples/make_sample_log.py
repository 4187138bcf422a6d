"""Write `examples/sample-log`: a small, realistic node log for `aether log replay` (the README's main job).

The story of one node, `node-a`: mesh settings and identities arrive, the registrar syncs, pods start (one with a
bad annotation), endpoints churn, routes are applied (one with an invalid name), Envoy ACKs and NACKs, a service is requested on
demand, a pod leaves. A checkpoint is written half way. Times are fixed, so the log is the same bytes every run:

    python examples/make_sample_log.py [--output DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import attrs
import trio

from aether.core.events import (
    Endpoint,
    EndpointAdded,
    EndpointRemoved,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    EndpointUpdated,
    Event,
    GatewayObjectUpserted,
    Health,
    KubeObject,
    KubeService,
    KubeServiceUpserted,
    MeshConfig,
    MeshConfigUpdated,
    ObjectMeta,
    OnDemandClusterRequested,
    Pod,
    PodAdded,
    PodRemoved,
    Record,
    RegistryServiceAdded,
    ResourceAcked,
    ResourceNacked,
    ServicePort,
    Svid,
    SvidRotated,
    TrustBundle,
    TrustBundleRotated,
    encode_event,
)
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, encode_state
from aether.core.values import Redacted
from aether.log import LOCK_NAME, open_event_log

START = 1_796_000_000_000_000_000  # 2026-11-30T00:53:20Z, in nanoseconds
STEP = 250_000_000  # a quarter of a second between observations
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _pod(name: str, account: str, ip: str, **annotations: str) -> Pod:
    return Pod(
        namespace="shop",
        name=name,
        uid=f"uid-{name}",
        node_name="node-a",
        service_account=account,
        labels={"aether.io/managed": "true", "app": account},
        annotations=annotations,
        ips=(ip,),
        netns=f"/var/run/netns/cni-{name}",
        container_id=f"cid-{name}",
    )


def _endpoint(account: str, ip: str, *, health: Health = Health.HEALTHY, weight: int = 1024) -> Endpoint:
    return Endpoint(
        service=f"shop/{account}",
        ip=ip,
        port=8080,
        ports=(8080,),
        weight=weight,
        region="eu-west",
        zone="eu-west-1a",
        health=health,
        namespace="shop",
        pod_name=f"{account}-{ip.rsplit('.', 1)[1]}",
        node_name="node-a" if ip.startswith("10.1.") else "node-b",
    )


def _route(name: str, spec: dict[str, object], *, generation: int = 1) -> GatewayObjectUpserted:
    meta = ObjectMeta(
        kind="HTTPRoute",
        namespace="shop",
        name=name,
        uid=f"uid-{name}",
        generation=generation,
        resource_version=str(100 + generation),
        creation_timestamp="2026-11-29T12:00:00Z",
    )
    return GatewayObjectUpserted(
        observed_at=0, source="kubernetes", object=KubeObject(meta=meta, spec_json=_canonical(spec))
    )


def story() -> list[Event]:
    """Return the node's events in the order they were observed (times are assigned by `timed`)."""
    canary = {
        "parentRefs": [{"group": "", "kind": "Service", "name": "cart"}],
        "rules": [{"backendRefs": [{"name": "cart", "weight": 90}, {"name": "cart-canary", "weight": 10}]}],
    }
    cart_service = KubeService(
        meta=ObjectMeta(
            kind="Service", namespace="shop", name="cart", uid="uid-svc-cart", resource_version="7"
        ),
        selector={"app": "cart"},
        ports=(ServicePort(name="http", port=80, target_port="8080"),),
        cluster_ip="10.96.0.20",
    )
    return [
        MeshConfigUpdated(
            observed_at=0,
            source="kubernetes",
            config=MeshConfig(mesh_domain="aether.internal", trust_domain="shop.example"),
        ),
        TrustBundleRotated(
            observed_at=0,
            source="identity",
            bundle=TrustBundle(
                trust_domain="shop.example",
                bundle_pem=b"-----BEGIN CERTIFICATE-----\nsample-ca\n-----END CERTIFICATE-----\n",
            ),
        ),
        EndpointsSnapshotReceived(
            observed_at=0,
            source="registrar",
            version="41",
            services=("shop/cart", "shop/catalog", "shop/web"),
            endpoints=(
                _endpoint("catalog", "10.2.0.11"),
                _endpoint("catalog", "10.2.0.12"),
                _endpoint("cart", "10.2.0.21"),
            ),
        ),
        EndpointsSnapshotCompleted(observed_at=0, source="registrar", version="41"),
        PodAdded(
            observed_at=0,
            source="cni",
            pod=_pod("web-1", "web", "10.1.0.5", **{"config.aether.io/upstreams": "cart,catalog"}),
        ),
        SvidRotated(
            observed_at=0,
            source="identity",
            svid=Svid(
                spiffe_id="spiffe://shop.example/ns/shop/sa/web",
                cert_chain_pem=b"-----BEGIN CERTIFICATE-----\nsample-web\n-----END CERTIFICATE-----\n",
                private_key=Redacted(b"-----BEGIN PRIVATE KEY-----\nsample\n-----END PRIVATE KEY-----\n"),
                not_after=START + 3_600_000_000_000,
            ),
        ),
        EndpointAdded(
            observed_at=0,
            source="registrar",
            version="42",
            endpoint=_endpoint("web", "10.1.0.5", health=Health.UNHEALTHY),
        ),
        EndpointUpdated(
            observed_at=0, source="registrar", version="43", endpoint=_endpoint("web", "10.1.0.5")
        ),
        PodAdded(
            observed_at=0,
            source="cni",
            pod=_pod("cart-1", "cart", "10.1.0.6", **{"endpoint.aether.io/weight": "lots"}),
        ),
        EndpointAdded(
            observed_at=0, source="registrar", version="44", endpoint=_endpoint("cart", "10.1.0.6")
        ),
        KubeServiceUpserted(observed_at=0, source="kubernetes", service=cart_service),
        _route("cart-canary", canary),
        ResourceAcked(
            observed_at=0, source="xds", node_id="node-a", type_url=CLUSTER, version="v1", nonce="1"
        ),
        ResourceNacked(
            observed_at=0,
            source="xds",
            node_id="node-a",
            type_url=LISTENER,
            version="v1",
            nonce="2",
            error_code=13,
            error_message="sample: duplicate listener address",
        ),
        ResourceAcked(
            observed_at=0, source="xds", node_id="node-a", type_url=LISTENER, version="v2", nonce="3"
        ),
        OnDemandClusterRequested(
            observed_at=0, source="xds", node_id="node-a", cluster_name="payments.shop.aether.internal"
        ),
        RegistryServiceAdded(observed_at=0, source="registrar", version="45", service="shop/payments"),
        EndpointAdded(
            observed_at=0, source="registrar", version="46", endpoint=_endpoint("payments", "10.2.0.31")
        ),
        EndpointRemoved(
            observed_at=0, source="registrar", version="47", service="shop/catalog", ip="10.2.0.12"
        ),
        _route("Cart_Retry", {"parentRefs": [{"kind": "Service", "name": "cart"}]}),
        EndpointRemoved(
            observed_at=0, source="registrar", version="48", service="shop/catalog", ip="10.2.0.99"
        ),
        PodRemoved(observed_at=0, source="cni", namespace="shop", name="cart-1", uid="uid-cart-1"),
    ]


def timed(events: list[Event]) -> list[Event]:
    """Return `events` with observation times one STEP apart from START."""
    return [attrs.evolve(event, observed_at=START + index * STEP) for index, event in enumerate(events)]


async def write(output: Path) -> None:
    """Write the sample log to `output` (replacing it), with a checkpoint half way."""
    if await trio.Path(output).exists():
        await trio.to_thread.run_sync(shutil.rmtree, output)
    events = timed(story())
    half = len(events) // 2
    async with open_event_log(output) as log:
        await log.append_many([encode_event(event) for event in events[:half]])
        state = fold_all(
            EMPTY_STATE, [Record(seq=index + 1, event=event) for index, event in enumerate(events[:half])]
        )
        await log.write_checkpoint(seq=state.seq, payload=encode_state(state))
        await log.append_many([encode_event(event) for event in events[half:]])
    # The lock file names the pid that wrote the log: no part of a sample that must regenerate byte for byte.
    await trio.Path(output / LOCK_NAME).unlink()
    print(f"wrote {len(events)} records and a checkpoint at seq {half} to {output}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "sample-log")
    trio.run(write, parser.parse_args().output)


if __name__ == "__main__":
    main()
