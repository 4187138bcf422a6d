"""The Delta stream machine: wildcard and named subscriptions, per-resource versions, removals, NACKs without loops
(and without rejecting the good resources a NACKed response carried), O(changed) pushes,
reconnects without churn, on-demand CDS and the CDS→EDS trap, sans-IO."""

from __future__ import annotations

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from google.rpc import status_pb2

from aether.core.events import OnDemandClusterRequested, ResourceAcked, ResourceNacked
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, version_of
from aether.xds.delta import DeltaStream
from aether.xds.protocol import ProtocolError, StreamOutput, TypeStatus
from tests.xds._snapshots import NODE, assignment, cluster, snapshot

NOW = 1_000
SNAP = snapshot(cluster("a"), cluster("b"), assignment("a", 1), assignment("b", 2))


def request(
    type_url: str = CLUSTER_TYPE,
    *,
    subscribe: tuple[str, ...] = (),
    unsubscribe: tuple[str, ...] = (),
    nonce: str = "",
    error: str | None = None,
    initial: dict[str, str] | None = None,
) -> discovery_pb2.DeltaDiscoveryRequest:
    message = discovery_pb2.DeltaDiscoveryRequest(
        type_url=type_url,
        resource_names_subscribe=list(subscribe),
        resource_names_unsubscribe=list(unsubscribe),
        response_nonce=nonce,
        initial_resource_versions=initial or {},
    )
    message.node.id = NODE
    if error is not None:
        message.error_detail.CopyFrom(status_pb2.Status(code=3, message=error))
    return message


def sent(response: discovery_pb2.DeltaDiscoveryResponse) -> dict[str, str]:
    return {item.name: item.version for item in response.resources}


def test_a_legacy_wildcard_gets_every_cluster_with_its_digest_as_version() -> None:
    """A first CDS request naming nothing subscribes to all clusters; each carries its own version."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    (response,) = stream.receive(request(), now=NOW).responses
    clusters = SNAP.of_type(CLUSTER_TYPE)
    assert sent(response) == {name: resource.digest for name, resource in clusters.items()}
    assert list(response.removed_resources) == []


def test_only_changed_resources_and_removals_are_sent_after_an_ack() -> None:
    """After an ACK, a publish sends just what changed and names what vanished."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    (first,) = stream.receive(request(), now=NOW).responses
    output = stream.receive(request(nonce=first.nonce), now=NOW)
    assert [type(event) for event in output.events] == [ResourceAcked]
    assert stream.status()[0].status is TypeStatus.SYNCED
    (second,) = stream.publish(snapshot(cluster("a", timeout_ms=9), seq=2), now=NOW).responses
    assert list(sent(second)) == ["a"]
    assert list(second.removed_resources) == ["b"]


def test_a_nacked_resource_is_not_sent_again_until_it_changes() -> None:
    """NACK: the event is recorded, the rejected version is never re-sent, a new version is."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    (first,) = stream.receive(request(), now=NOW).responses
    stream.receive(request(nonce=first.nonce), now=NOW)
    bad = snapshot(cluster("a", timeout_ms=1), cluster("b"), seq=2)
    (rejected,) = stream.publish(bad, now=NOW).responses
    output = stream.receive(request(nonce=rejected.nonce, error="invalid"), now=NOW + 5)
    assert [
        (type(event), event.error_message) for event in output.events if isinstance(event, ResourceNacked)
    ] == [(ResourceNacked, "invalid")]
    assert output.responses == ()
    assert stream.publish(bad, now=NOW).responses == ()
    assert stream.status()[0].status is TypeStatus.NACKED
    (fixed,) = stream.publish(snapshot(cluster("a", timeout_ms=2), cluster("b"), seq=3), now=NOW).responses
    assert list(sent(fixed)) == ["a"]


def test_a_nack_of_several_resources_sends_each_again_alone_and_rejects_only_the_bad_one() -> None:
    """A NACK rejects a response, not its resources: they go out again one per response, and only the one Envoy
    NACKs alone is rejected; the good one reaches Envoy at its new version."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    (first,) = stream.receive(request(), now=NOW).responses
    stream.receive(request(nonce=first.nonce), now=NOW)
    changed = snapshot(cluster("a", timeout_ms=1), cluster("b", timeout_ms=7), seq=2)
    (both,) = stream.publish(changed, now=NOW).responses
    assert list(sent(both)) == ["a", "b"]
    alone_a, alone_b = stream.receive(
        request(nonce=both.nonce, error="cluster a: invalid"), now=NOW
    ).responses
    assert [sent(alone_a), sent(alone_b)] == [
        {"a": changed.of_type(CLUSTER_TYPE)["a"].digest},
        {"b": changed.of_type(CLUSTER_TYPE)["b"].digest},
    ]
    assert stream.receive(request(nonce=alone_a.nonce, error="cluster a: invalid"), now=NOW).responses == ()
    stream.receive(request(nonce=alone_b.nonce), now=NOW)
    assert stream.publish(changed, now=NOW).responses == ()  # a is rejected at that version, b is held
    (row,) = stream.status()
    assert row.acked_version == version_of(
        {"a": SNAP.of_type(CLUSTER_TYPE)["a"].digest, "b": changed.of_type(CLUSTER_TYPE)["b"].digest}
    )


def test_a_push_after_a_derived_snapshot_compares_only_what_changed() -> None:
    """`with_changes` tells the stream which names changed: one new load assignment goes out alone."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    (first,) = stream.receive(request(ENDPOINT_TYPE, subscribe=("a", "b")), now=NOW).responses
    stream.receive(request(ENDPOINT_TYPE, nonce=first.nonce), now=NOW)
    moved = SNAP.with_changes(seq=2, upserted=[assignment("b", 3)])
    assert moved.changed_since(SNAP) == {ENDPOINT_TYPE: {"b"}}
    (second,) = stream.publish(moved, now=NOW).responses
    assert sent(second) == {"b": assignment("b", 3).digest}
    assert stream.publish(moved, now=NOW).responses == ()


def test_unsubscribing_a_name_never_subscribed_is_a_protocol_error() -> None:
    """A Delta request may only unsubscribe what it subscribed."""
    stream = DeltaStream()
    stream.receive(request(ENDPOINT_TYPE, subscribe=("a",)), now=NOW)
    with pytest.raises(
        ProtocolError, match=r"^node 'node-a': EDS request unsubscribes 'zzz', which it never subscribed$"
    ):
        stream.receive(request(ENDPOINT_TYPE, unsubscribe=("zzz",)), now=NOW)


@pytest.mark.parametrize(
    ("type_url", "subscribe"), [(CLUSTER_TYPE, ()), (ENDPOINT_TYPE, ("a", "b"))], ids=["wildcard", "named"]
)
def test_a_reconnect_with_the_current_versions_gets_one_empty_response(
    type_url: str, subscribe: tuple[str, ...]
) -> None:
    """initial_resource_versions equal to the snapshot's digests: no resource is re-sent, but the first request is
    answered (Envoy resets its reconnect backoff only on a response), and its ACK leaves the type SYNCED."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    held = {name: resource.digest for name, resource in SNAP.of_type(type_url).items()}
    (response,) = stream.receive(request(type_url, subscribe=subscribe, initial=held), now=NOW).responses
    assert (response.type_url, response.system_version_info, response.nonce) == (
        type_url,
        SNAP.version(type_url),
        "1",
    )
    assert (list(response.resources), list(response.removed_resources)) == ([], [])
    output = stream.receive(request(type_url, nonce=response.nonce), now=NOW)
    assert output == StreamOutput(
        events=(
            ResourceAcked(
                observed_at=NOW,
                source="xds",
                node_id=NODE,
                type_url=type_url,
                version=SNAP.version(type_url),
                nonce="1",
            ),
        )
    )
    assert [row.status for row in stream.status()] == [TypeStatus.SYNCED]
    assert stream.publish(snapshot(*SNAP.of_type(type_url).values(), seq=2), now=NOW).responses == ()


def test_an_unknown_cluster_is_requested_on_demand_then_sent_when_it_appears() -> None:
    """On-demand CDS: one event per name; the cluster goes out once a snapshot holds it."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    output = stream.receive(request(subscribe=("web.shop.aether.internal",)), now=NOW)
    assert output.events == (
        OnDemandClusterRequested(
            observed_at=NOW, source="xds", node_id=NODE, cluster_name="web.shop.aether.internal"
        ),
    )
    (first,) = output.responses
    assert (list(first.resources), list(first.removed_resources)) == ([], [])
    assert stream.publish(snapshot(cluster("a"), seq=2), now=NOW).events == ()
    (response,) = stream.publish(snapshot(cluster("web.shop.aether.internal"), seq=3), now=NOW).responses
    assert list(sent(response)) == ["web.shop.aether.internal"]


def test_an_expired_on_demand_cluster_subscribed_again_is_requested_again_and_sent() -> None:
    """An on-demand cluster dropped from the snapshot (its TTL ran out) is removed; when a later request makes Envoy
    subscribe the name again on the same stream, it is requested on demand again and sent once it is back."""
    name = "web.shop.aether.internal"
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    assert len(stream.receive(request(subscribe=(name,)), now=NOW).events) == 1
    (response,) = stream.publish(snapshot(cluster(name), seq=2), now=NOW).responses
    stream.receive(request(nonce=response.nonce), now=NOW)
    (removal,) = stream.publish(snapshot(cluster("a"), seq=3), now=NOW).responses
    assert list(removal.removed_resources) == [name]
    stream.receive(request(nonce=removal.nonce), now=NOW)
    again = stream.receive(request(subscribe=(name,)), now=NOW + 1)
    assert again.events == (
        OnDemandClusterRequested(observed_at=NOW + 1, source="xds", node_id=NODE, cluster_name=name),
    )
    (back,) = stream.publish(snapshot(cluster("a"), cluster(name), seq=4), now=NOW + 1).responses
    assert list(sent(back)) == [name]


def test_a_held_resource_subscribed_again_is_sent_again() -> None:
    """Envoy subscribing a name it was sent and ACKed waits for the server again: the resource goes out again."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    (response,) = stream.receive(request(ENDPOINT_TYPE, subscribe=("a",)), now=NOW).responses
    assert list(sent(response)) == ["a"]
    stream.receive(request(ENDPOINT_TYPE, nonce=response.nonce), now=NOW)
    (again,) = stream.receive(request(ENDPOINT_TYPE, subscribe=("a",)), now=NOW).responses
    assert list(sent(again)) == ["a"]


def test_a_cluster_no_service_matches_is_answered_as_removed() -> None:
    """A name the snapshot lists as not found is answered at once with removed_resources, not left hanging."""
    stream = DeltaStream()
    stream.publish(snapshot(cluster("a"), not_found=("ghost.shop.aether.internal",)), now=NOW)
    output = stream.receive(request(subscribe=("ghost.shop.aether.internal",)), now=NOW)
    (response,) = output.responses
    assert list(response.removed_resources) == ["ghost.shop.aether.internal"]
    assert output.events == ()


def test_a_held_cluster_known_not_to_exist_is_removed_once() -> None:
    """A reconnect stating a cluster that no service matches any more names it once in removed_resources."""
    stream = DeltaStream()
    stream.publish(snapshot(cluster("a"), not_found=("ghost",)), now=NOW)
    output = stream.receive(request(subscribe=("ghost",), initial={"ghost": "old"}), now=NOW)
    (response,) = output.responses
    assert (list(response.resources), list(response.removed_resources)) == ([], ["ghost"])


def test_a_changed_cluster_makes_its_endpoints_go_out_again() -> None:
    """The CDS→EDS trap in Delta: Envoy does not re-ask for known endpoints, so the server pushes them."""
    stream = DeltaStream()
    stream.publish(SNAP, now=NOW)
    (clusters,) = stream.receive(request(), now=NOW).responses
    (endpoints,) = stream.receive(request(ENDPOINT_TYPE, subscribe=("a", "b")), now=NOW).responses
    stream.receive(request(nonce=clusters.nonce), now=NOW)
    stream.receive(request(ENDPOINT_TYPE, nonce=endpoints.nonce), now=NOW)
    changed = snapshot(
        cluster("a", timeout_ms=9), cluster("b"), assignment("a", 1), assignment("b", 2), seq=2
    )
    responses = stream.publish(changed, now=NOW).responses
    assert [(response.type_url, sorted(sent(response))) for response in responses] == [
        (CLUSTER_TYPE, ["a"]),
        (ENDPOINT_TYPE, ["a"]),
    ]


def test_the_first_wildcard_response_goes_out_even_when_empty() -> None:
    """A wildcard subscription to a type the snapshot lacks is answered once, with nothing in it."""
    stream = DeltaStream()
    stream.publish(snapshot(assignment("a", 1)), now=NOW)
    (response,) = stream.receive(request(), now=NOW).responses
    assert (len(response.resources), list(response.removed_resources)) == (0, [])
    assert stream.publish(snapshot(assignment("a", 1), seq=2), now=NOW).responses == ()
