"""Fuzzing the ADS stream machines: any sequence of requests (as messages or as bytes, junk included) and snapshots
gives responses or a `ProtocolError`, never another exception, and what they answer stays well-formed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from aether.core.events import OnDemandClusterRequested, ResourceAcked, ResourceNacked
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, TYPE_ORDER, Resource, Snapshot
from aether.xds.delta import DeltaStream
from aether.xds.encoding import EncodedResponse
from aether.xds.protocol import ProtocolError, StatusCode, StreamOutput
from aether.xds.sotw import SotwStream
from property_tests.strategies import (
    XDS_LAST_NONCE,
    delta_requests,
    snapshot_changes,
    sotw_requests,
    xds_stream_inputs,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_000
_REQUEST_TYPES = (discovery_pb2.DiscoveryRequest, discovery_pb2.DeltaDiscoveryRequest)


def _feed(machine: SotwStream | DeltaStream, item: Any) -> StreamOutput:
    """What the server does with one input (`aether.xds.server`): publish a snapshot, or decode and handle a request."""
    if isinstance(item, Snapshot):
        return machine.publish(item, now=NOW)
    if isinstance(item, bytes):
        return machine.receive_bytes(item, now=NOW)
    return machine.receive(item, now=NOW)


def _run(machine: SotwStream | DeltaStream, inputs: list[Any], response_type: type[Any]) -> list[Any]:
    """Feed `inputs` until the stream ends with a protocol error (as the server ends it); return the responses."""
    responses: list[Any] = []
    last_nonces: dict[str, str] = {}
    refused: ProtocolError | None = None
    for item in inputs:
        if isinstance(item, _REQUEST_TYPES) and item.response_nonce == XDS_LAST_NONCE:
            item = copy.deepcopy(item)
            item.response_nonce = last_nonces.get(item.type_url, "")
        try:
            output = _feed(machine, item)
        except ProtocolError as exc:
            refused = exc
            break
        for response in output.responses:
            assert type(response) is response_type
            assert response.type_url in TYPE_ORDER
        for feedback in output.events:
            assert isinstance(feedback, ResourceAcked | ResourceNacked | OnDemandClusterRequested)
            assert feedback.node_id == machine.node_id
        responses.extend(output.responses)
        last_nonces.update((response.type_url, response.nonce) for response in output.responses)
        assert machine.sync_states() == tuple(row.status for row in machine.status())
    if refused is not None:
        assert refused.code in StatusCode
        assert str(refused), "a protocol error must say what was wrong"
    event("refused" if refused else "served to the end")
    event(f"responses: {min(len(responses), 3)}{'+' if len(responses) >= 3 else ''}")
    nonces = [int(response.nonce) for response in responses]
    assert nonces == list(range(1, len(nonces) + 1)), "each response carries the stream's next nonce"
    return responses


@PROPERTY
@given(inputs=xds_stream_inputs(sotw_requests()))
def test_a_sotw_stream_answers_any_input_or_refuses_it_with_a_protocol_error(inputs: list[Any]) -> None:
    """Any SotW request sequence, bytes and snapshots: responses or ProtocolError, nothing else."""
    _run(SotwStream(), inputs, EncodedResponse)


@PROPERTY
@given(inputs=xds_stream_inputs(delta_requests()))
def test_a_delta_stream_answers_any_input_or_refuses_it_with_a_protocol_error(inputs: list[Any]) -> None:
    """Any Delta request sequence, bytes and snapshots: responses or ProtocolError; no response names a resource
    twice (Envoy NACKs that)."""
    for response in _run(DeltaStream(), inputs, discovery_pb2.DeltaDiscoveryResponse):
        names = [resource.name for resource in response.resources] + list(response.removed_resources)
        assert len(names) == len(set(names)), names


@pytest.mark.parametrize("machine", [SotwStream, DeltaStream])
def test_junk_bytes_are_a_protocol_error_naming_the_request_type(
    machine: type[SotwStream | DeltaStream],
) -> None:
    """Bytes that are no protobuf end the stream with INVALID_ARGUMENT, naming the type expected."""
    kind = "DeltaDiscoveryRequest" if machine is DeltaStream else "DiscoveryRequest"
    with pytest.raises(ProtocolError) as caught:
        machine().receive_bytes(b"\xff" * 20, now=NOW)
    assert caught.value.code is StatusCode.INVALID_ARGUMENT
    assert str(caught.value) == (
        f"request of 20 bytes does not decode as envoy.service.discovery.v3.{kind}: Error parsing message with"
        f" type 'envoy.service.discovery.v3.{kind}': Wire format was corrupt"
    )


def _delta_sent(response: discovery_pb2.DeltaDiscoveryResponse) -> tuple[Any, ...]:
    return (
        response.type_url,
        tuple((item.name, item.version) for item in response.resources),
        tuple(response.removed_resources),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(snapshot_changes(), min_size=1, max_size=10), st.sets(st.integers(0, 9)))
def test_a_delta_push_of_a_derived_snapshot_sends_what_a_full_comparison_sends(
    steps: list[tuple[tuple[Resource, ...], tuple[tuple[str, str], ...]]], nacked: set[int]
) -> None:
    """O(changed) pushes (snapshots from `with_changes`) send exactly what comparing every resource sends (the same
    snapshots built whole), whatever Envoy ACKs or NACKs."""
    derived, whole = DeltaStream(), DeltaStream()
    snapshot = Snapshot.build(node_id="node-a", resources=())
    requests = [
        discovery_pb2.DeltaDiscoveryRequest(type_url=CLUSTER_TYPE),
        discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT_TYPE, resource_names_subscribe=["a", "b", "c"]),
    ]
    for machine in (derived, whole):
        for message in requests:
            message.node.id = "node-a"
            machine.receive(message, now=1)
    for step, (upserted, removed) in enumerate(steps, 1):
        snapshot = snapshot.with_changes(seq=step, upserted=upserted, removed=removed)
        built = Snapshot.build(
            node_id="node-a",
            seq=step,
            resources=[resource for items in snapshot.resources.values() for resource in items.values()],
        )
        answers = [derived.publish(snapshot, now=step), whole.publish(built, now=step)]
        assert [_delta_sent(r) for r in answers[0].responses] == [
            _delta_sent(r) for r in answers[1].responses
        ]
        for index, response in enumerate(answers[0].responses):
            # Both machines issue the same nonces: answer both alike (ACK, or NACK the chosen ones).
            feedback = discovery_pb2.DeltaDiscoveryRequest(
                type_url=response.type_url, response_nonce=response.nonce
            )
            feedback.node.id = "node-a"
            if (step + index) % 10 in nacked:
                feedback.error_detail.message = "rejected"
            replies = [machine.receive(feedback, now=step) for machine in (derived, whole)]
            assert [_delta_sent(r) for r in replies[0].responses] == [
                _delta_sent(r) for r in replies[1].responses
            ]


def _sotw_sent(response: EncodedResponse) -> tuple[Any, ...]:
    return (response.type_url, response.version_info, tuple(item.value for item in response.resources))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(snapshot_changes(), min_size=1, max_size=10))
def test_a_sotw_push_of_a_derived_snapshot_sends_what_a_fresh_selection_sends(
    steps: list[tuple[tuple[Resource, ...], tuple[tuple[str, str], ...]]],
) -> None:
    """A named subscription's selection updated from the changed names (snapshots from `with_changes`) sends exactly
    what selecting afresh sends (the same snapshots built whole), with ACKs in between."""
    derived, whole = SotwStream(), SotwStream()
    snapshot = Snapshot.build(node_id="node-a", resources=())
    for machine in (derived, whole):
        for message in (
            discovery_pb2.DiscoveryRequest(type_url=CLUSTER_TYPE),
            discovery_pb2.DiscoveryRequest(type_url=ENDPOINT_TYPE, resource_names=["a", "b", "c"]),
        ):
            message.node.id = "node-a"
            machine.receive(message, now=1)
    for step, (upserted, removed) in enumerate(steps, 1):
        snapshot = snapshot.with_changes(seq=step, upserted=upserted, removed=removed)
        built = Snapshot.build(
            node_id="node-a",
            seq=step,
            resources=[resource for items in snapshot.resources.values() for resource in items.values()],
        )
        answers = [derived.publish(snapshot, now=step), whole.publish(built, now=step)]
        assert [_sotw_sent(r) for r in answers[0].responses] == [_sotw_sent(r) for r in answers[1].responses]
        for response in answers[0].responses:
            ack = discovery_pb2.DiscoveryRequest(
                type_url=response.type_url, response_nonce=response.nonce, version_info=response.version_info
            )
            if response.type_url == ENDPOINT_TYPE:
                ack.resource_names.extend(["a", "b", "c"])
            ack.node.id = "node-a"
            replies = [machine.receive(ack, now=step) for machine in (derived, whole)]
            assert [_sotw_sent(r) for r in replies[0].responses] == [
                _sotw_sent(r) for r in replies[1].responses
            ]
