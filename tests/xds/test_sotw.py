"""The SotW stream machine: subscriptions, ACK/NACK, stale nonces, reconnects and the CDS→EDS trap, sans-IO."""

from __future__ import annotations

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from google.rpc import status_pb2

from aether.core.events import ResourceAcked, ResourceNacked
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, type_version
from aether.xds.protocol import ProtocolError, StatusCode, TypeStatus
from aether.xds.sotw import SotwStream
from tests.xds._snapshots import NODE, assignment, cluster, snapshot

NOW = 1_000


def request(
    type_url: str = CLUSTER_TYPE,
    *,
    names: tuple[str, ...] = (),
    version: str = "",
    nonce: str = "",
    error: str | None = None,
    node: str | None = NODE,
) -> discovery_pb2.DiscoveryRequest:
    message = discovery_pb2.DiscoveryRequest(
        type_url=type_url, resource_names=list(names), version_info=version, response_nonce=nonce
    )
    if node:
        message.node.id = node
    if error is not None:
        message.error_detail.CopyFrom(status_pb2.Status(code=3, message=error))
    return message


def names_of(response: discovery_pb2.DiscoveryResponse) -> list[str]:
    return [item.value for item in response.resources]


SNAP = snapshot(cluster("a"), cluster("b"), assignment("a", 1), assignment("b", 2))


def test_the_first_request_without_a_node_id_is_a_protocol_error() -> None:
    """A stream must say which node it serves before anything else."""
    with pytest.raises(ProtocolError, match=r"^the first request on a stream must carry a node id") as caught:
        SotwStream().receive(request(node=None), now=NOW)
    assert caught.value.code is StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            request("type.googleapis.com/envoy.Nope"),
            r"^node 'node-a': type url 'type.googleapis.com/envoy.Nope' is not served",
        ),
        (
            request(ENDPOINT_TYPE, names=("a", "")),
            r"^node 'node-a': EDS request names an empty resource name$",
        ),
        (
            request(nonce="7"),
            r"^node 'node-a': CDS request acknowledges nonce '7', which this stream never sent$",
        ),
    ],
)
def test_malformed_requests_are_protocol_errors(bad: discovery_pb2.DiscoveryRequest, message: str) -> None:
    """An unknown type, an empty name and a nonce never sent each end the stream with INVALID_ARGUMENT."""
    with pytest.raises(ProtocolError, match=message):
        SotwStream().receive(bad, now=NOW)


def test_a_subscription_before_any_snapshot_is_answered_by_the_first_publish() -> None:
    """Nothing is sent until the node has a snapshot; then every cluster goes out under the snapshot's version."""
    stream = SotwStream()
    assert stream.receive(request(), now=NOW).responses == ()
    output = stream.publish(SNAP, now=NOW)
    (response,) = output.responses
    assert (response.type_url, response.version_info, response.nonce) == (
        CLUSTER_TYPE,
        SNAP.version(CLUSTER_TYPE),
        "1",
    )
    assert len(response.resources) == 2
    assert [row.status for row in stream.status()] == [TypeStatus.STALE]


def test_an_ack_records_the_version_and_sends_nothing() -> None:
    """A request echoing our nonce without error is an ACK: a ResourceAcked event, status SYNCED."""
    stream = SotwStream()
    stream.receive(request(), now=NOW)
    (response,) = stream.publish(SNAP, now=NOW).responses
    output = stream.receive(request(version=response.version_info, nonce=response.nonce), now=NOW + 1)
    assert output.responses == ()
    assert output.events == (
        ResourceAcked(
            observed_at=NOW + 1,
            source="xds",
            node_id=NODE,
            type_url=CLUSTER_TYPE,
            version=response.version_info,
            nonce="1",
        ),
    )
    assert [row.status for row in stream.status()] == [TypeStatus.SYNCED]


def test_a_nack_is_recorded_and_never_answered_with_the_rejected_resources() -> None:
    """After a NACK, publishing the same snapshot again sends nothing; a changed one is sent."""
    stream = SotwStream()
    stream.receive(request(), now=NOW)
    (first,) = stream.publish(SNAP, now=NOW).responses
    stream.receive(request(version=first.version_info, nonce=first.nonce), now=NOW)
    bad = snapshot(cluster("a", timeout_ms=999), cluster("b"), assignment("a", 1), assignment("b", 2), seq=2)
    (rejected,) = stream.publish(bad, now=NOW).responses[:1]
    output = stream.receive(
        request(version=first.version_info, nonce=rejected.nonce, error="bad timeout"), now=NOW
    )
    assert output.responses == ()
    assert output.events == (
        ResourceNacked(
            observed_at=NOW,
            source="xds",
            node_id=NODE,
            type_url=CLUSTER_TYPE,
            version=rejected.version_info,
            nonce=rejected.nonce,
            error_code=3,
            error_message="bad timeout",
        ),
    )
    assert stream.publish(bad, now=NOW).responses == ()
    row = stream.status()[0]
    assert (row.status, row.acked_version, row.error) == (
        TypeStatus.NACKED,
        first.version_info,
        "bad timeout",
    )
    (fixed,) = stream.publish(snapshot(cluster("a"), cluster("b"), cluster("c"), seq=3), now=NOW).responses[
        :1
    ]
    assert fixed.type_url == CLUSTER_TYPE


def test_a_stale_nonce_is_ignored() -> None:
    """An answer to a response we have since superseded changes nothing."""
    stream = SotwStream()
    stream.receive(request(), now=NOW)
    (first,) = stream.publish(SNAP, now=NOW).responses
    stream.publish(snapshot(cluster("a"), seq=2), now=NOW)
    output = stream.receive(request(version=first.version_info, nonce=first.nonce, error="late"), now=NOW)
    assert output == stream.receive(request(version="x", nonce=first.nonce), now=NOW)
    assert output.responses == output.events == ()


def test_a_reconnect_stating_the_current_version_is_answered() -> None:
    """A new stream whose first request states the version we would send still gets it (Envoy resets its reconnect
    backoff only on a response); the ACK leaves the type SYNCED and nothing more goes out."""
    stream = SotwStream()
    stream.publish(SNAP, now=NOW)
    output = stream.receive(request(version=SNAP.version(CLUSTER_TYPE)), now=NOW)
    (response,) = output.responses
    assert (response.version_info, list(response.resources)) == (
        SNAP.version(CLUSTER_TYPE),
        [resource.packed for resource in SNAP.of_type(CLUSTER_TYPE).values()],
    )
    assert output.events == ()
    acked = stream.receive(request(version=response.version_info, nonce=response.nonce), now=NOW)
    assert (acked.responses, [type(event) for event in acked.events]) == ((), [ResourceAcked])
    assert stream.status()[0].status is TypeStatus.SYNCED
    assert stream.publish(SNAP, now=NOW).responses == ()


def test_named_subscriptions_get_only_their_names_and_changes_are_answered() -> None:
    """EDS is asked by name: the response holds those names; an ACK that changes the names is answered."""
    stream = SotwStream()
    stream.publish(SNAP, now=NOW)
    (first,) = stream.receive(request(ENDPOINT_TYPE, names=("a",)), now=NOW).responses
    assert first.version_info == type_version([SNAP.of_type(ENDPOINT_TYPE)["a"]])
    assert len(first.resources) == 1
    output = stream.receive(
        request(ENDPOINT_TYPE, names=("a", "b"), version=first.version_info, nonce=first.nonce), now=NOW
    )
    (second,) = output.responses
    assert len(second.resources) == 2


def test_a_changed_cluster_makes_its_endpoints_go_out_again() -> None:
    """The CDS→EDS trap: when a cluster changes, EDS is re-sent even though the endpoints did not change."""
    stream = SotwStream()
    stream.receive(request(), now=NOW)
    stream.receive(request(ENDPOINT_TYPE, names=("a", "b")), now=NOW)
    stream.publish(SNAP, now=NOW)
    changed = snapshot(
        cluster("a", timeout_ms=500), cluster("b"), assignment("a", 1), assignment("b", 2), seq=2
    )
    responses = stream.publish(changed, now=NOW).responses
    assert [response.type_url for response in responses] == [CLUSTER_TYPE, ENDPOINT_TYPE]
    assert responses[1].version_info == SNAP.version(ENDPOINT_TYPE)


def test_a_subscription_to_a_type_the_snapshot_lacks_gets_an_empty_first_response() -> None:
    """Envoy waits for a first response before it finishes initializing: an empty type still gets one, once."""
    stream = SotwStream()
    stream.receive(request(), now=NOW)
    empty = snapshot(assignment("a", 1))
    (response,) = stream.publish(empty, now=NOW).responses
    assert (response.type_url, response.version_info, len(response.resources)) == (CLUSTER_TYPE, "", 0)
    assert stream.publish(empty, now=NOW).responses == ()
