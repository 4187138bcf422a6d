"""Tests of `aether.core.state.codec`: the checkpoint form of the state and its digest."""

from __future__ import annotations

import hashlib

import immutables
import pytest

from aether.core.errors import CodecError
from aether.core.events import Endpoint, Protocol
from aether.core.events.wire import plan_for
from aether.core.state import (
    EMPTY_STATE,
    State,
    decode_state,
    encode_state,
    state_digest,
    state_from_proto,
    state_to_proto,
)
from aether.proto.log.v1 import log_pb2
from aether.testing import (
    endpoints_snapshot_completed,
    endpoints_snapshot_received,
    fold_events,
    gateway_object_upserted,
    kube_service_upserted,
    make_endpoint,
    make_kube_object,
    make_kube_service,
    make_mesh_config,
    make_pod,
    make_svid,
    make_trust_bundle,
    mesh_config_updated,
    on_demand_cluster_requested,
    pod_added,
    pod_removed,
    reference_grant_upserted,
    resource_acked,
    resource_nacked,
    svid_rotated,
    trust_bundle_rotated,
)

ENDPOINTS = (
    make_endpoint("10.0.0.2", metadata={"version": "v2", "track": "canary"}),
    make_endpoint("10.0.0.1", protocol=Protocol.TCP, ports=(9090, 9091)),
    make_endpoint("10.0.0.1"),
    make_endpoint("10.0.1.1", service="shop/db", port=5432),
)


def _populated() -> State:
    """A state holding something in every part, rejections included."""
    return fold_events(
        pod_added(make_pod("web-2", labels={"aether.io/managed": "true", "app": "web"})),
        pod_added(make_pod("web-1", annotations={"endpoint.aether.io/weight": "nope"})),
        pod_removed("ghost"),
        endpoints_snapshot_received(
            *ENDPOINTS, version="3", services=("shop/db", "default/web", "shop/cart")
        ),
        endpoints_snapshot_completed("3"),
        kube_service_upserted(make_kube_service(selector={"b": "2", "a": "1"})),
        gateway_object_upserted(make_kube_object(spec={"rules": [{"matches": []}]})),
        reference_grant_upserted(make_kube_object("allow", kind="ReferenceGrant")),
        mesh_config_updated(make_mesh_config(mesh_domain="mesh.local", generation=4)),
        svid_rotated(make_svid(private_key=b"secret-key")),
        trust_bundle_rotated(make_trust_bundle()),
        resource_acked("node-b", version="v1"),
        resource_nacked("node-a", version="v2"),
        on_demand_cluster_requested("web.default.mesh.local:8080"),
    )


def test_the_empty_state_round_trips() -> None:
    """The empty state decodes from its own bytes."""
    assert decode_state(encode_state(EMPTY_STATE)) == EMPTY_STATE


def test_a_populated_state_round_trips_with_the_same_bytes_and_digest() -> None:
    """A state with every part populated decodes to an equal state, which encodes to the same bytes."""
    state = _populated()
    assert state.diagnostics.rejected_total == 2
    payload = encode_state(state)
    decoded = decode_state(payload)
    assert decoded == state
    assert encode_state(decoded) == payload
    assert state_digest(decoded) == state_digest(state)
    assert state_from_proto(state_to_proto(state)) == state


def test_equal_states_built_in_different_orders_encode_to_equal_bytes() -> None:
    """Pods and endpoints folded in another order give the same state and the same bytes."""
    forward = fold_events(
        pod_added(make_pod("web-1")), pod_added(make_pod("web-2")), endpoints_snapshot_received(*ENDPOINTS)
    )
    backward = fold_events(
        endpoints_snapshot_received(*reversed(ENDPOINTS)),
        pod_added(make_pod("web-2")),
        pod_added(make_pod("web-1")),
    )
    assert forward == backward
    assert encode_state(forward) == encode_state(backward)


def test_every_list_of_the_checkpoint_is_sorted_by_key() -> None:
    """Pods by key, endpoints by service then (protocol, ip), services and rejections by name."""
    message = state_to_proto(_populated())
    assert [(pod.pod.namespace, pod.pod.name) for pod in message.pods] == [
        ("default", "web-1"),
        ("default", "web-2"),
    ]
    assert list(message.registry.services) == ["default/web", "shop/cart", "shop/db"]
    assert [(item.service, Protocol(item.protocol), item.ip) for item in message.registry.endpoints] == [
        ("default/web", Protocol.HTTP, "10.0.0.1"),
        ("default/web", Protocol.HTTP, "10.0.0.2"),
        ("default/web", Protocol.TCP, "10.0.0.1"),
        ("shop/db", Protocol.HTTP, "10.0.1.1"),
    ]
    assert [(item.node_id, item.type_url.rsplit(".", 1)[-1]) for item in message.xds_feedback] == [
        ("node-a", "Cluster"),
        ("node-b", "Cluster"),
    ]
    assert [item.subject for item in message.rejections] == ["pod/default/ghost", "pod/default/web-1"]
    assert (message.seq, message.rejected_total) == (14, 2)


def test_the_digest_is_the_sha256_of_the_bytes() -> None:
    """`state_digest` is `sha256:` and the hex SHA-256 of `encode_state`."""
    state = _populated()
    assert state_digest(state) == "sha256:" + hashlib.sha256(encode_state(state)).hexdigest()


def test_different_states_have_different_digests() -> None:
    """A change anywhere, even only the seq, changes the digest."""
    state = _populated()
    assert state_digest(state) != state_digest(fold_events(resource_acked("node-c"), state=state))
    assert state_digest(EMPTY_STATE) != state_digest(State(seq=1))


def test_garbage_bytes_raise_codec_error() -> None:
    """Bytes that are no `aether.log.v1.State` raise `CodecError` naming the checkpoint."""
    with pytest.raises(
        CodecError, match=r"^cannot decode checkpoint state: not an aether\.log\.v1\.State \(.*\)$"
    ) as caught:
        decode_state(b"\xff\xff\xff\xff")
    assert caught.value.what == "checkpoint state"


def test_endpoints_out_of_service_order_or_repeated_decode_as_the_per_record_decoder_keys_them() -> None:
    """A canonical payload whose endpoints are not grouped by service, or name one endpoint twice (not what
    `encode_state` writes), keys them as the per-record decoder does: by service, the later of two replacing."""
    message = log_pb2.State(seq=3)
    message.registry.services.extend(["default/web", "shop/db"])
    for endpoint in (
        make_endpoint("10.0.0.1", weight=1),
        make_endpoint("10.0.1.1", service="shop/db"),
        make_endpoint("10.0.0.2"),
        make_endpoint("10.0.0.1", weight=7),
    ):
        plan_for(Endpoint).encode_into(endpoint, message.registry.endpoints.add())
    payload = message.SerializeToString(deterministic=True)
    decoded = decode_state(payload)
    assert decoded == state_from_proto(log_pb2.State.FromString(payload))
    assert decoded.registry.endpoints == immutables.Map(
        {
            "default/web": immutables.Map[tuple[Protocol, str], Endpoint](
                {
                    (Protocol.HTTP, "10.0.0.1"): make_endpoint("10.0.0.1", weight=7),
                    (Protocol.HTTP, "10.0.0.2"): make_endpoint("10.0.0.2"),
                }
            ),
            "shop/db": immutables.Map[tuple[Protocol, str], Endpoint](
                {(Protocol.HTTP, "10.0.1.1"): make_endpoint("10.0.1.1", service="shop/db")}
            ),
        }
    )


@pytest.mark.parametrize("canonical", [True, False], ids=["as-columns", "one-by-one"])
def test_an_enum_value_this_version_does_not_know_raises_codec_error(canonical: bool) -> None:
    """A protocol no member of `Protocol` holds is a `CodecError` naming the value, whether the endpoints are read
    as columns or (a payload with an unknown field) one by one."""
    message = state_to_proto(_populated())
    message.registry.endpoints[1].protocol = 7  # type: ignore[assignment]
    payload = message.SerializeToString(deterministic=True) + (b"" if canonical else b"\x98\x06\x01")
    with pytest.raises(
        CodecError,
        match=r"^cannot decode checkpoint state: enum value 7 is unknown \(written by a newer version\?\)$",
    ):
        decode_state(payload)
