"""Tests of `aether.core.events.codec`: events to log records and back."""

from __future__ import annotations

import immutables
import pytest

from aether.core.errors import CodecError, UnknownEventKind
from aether.core.events import (
    EVENT_TYPES,
    Endpoint,
    EndpointAdded,
    EndpointsSnapshotCompleted,
    Event,
    MeshConfigUpdated,
    PodRemoved,
    decode_event,
    encode_event,
    event_from_proto,
    event_to_proto,
)
from aether.proto.log.v1 import log_pb2
from aether.testing import make_mesh_config, make_pod, mesh_config_updated, one_event_of_each_type, pod_added

EVENTS = one_event_of_each_type()


@pytest.mark.parametrize("event", EVENTS, ids=[cls.__name__ for cls in EVENT_TYPES])
def test_every_event_type_round_trips_through_bytes(event: Event) -> None:
    """Decoding the bytes of an event gives an equal event, and encoding it again gives the same bytes."""
    payload = encode_event(event)
    assert decode_event(payload) == event
    assert encode_event(decode_event(payload)) == payload


@pytest.mark.parametrize("event", EVENTS, ids=[cls.__name__ for cls in EVENT_TYPES])
def test_every_event_type_round_trips_through_its_message(event: Event) -> None:
    """`event_from_proto(event_to_proto(event))` gives an equal event."""
    assert event_from_proto(event_to_proto(event)) == event


def test_the_bytes_of_an_event_are_pinned() -> None:
    """An event's bytes are its base fields then its kind's oneof field (24 for `endpoints_snapshot_completed`)."""
    event = EndpointsSnapshotCompleted(observed_at=1, source="registrar", version="7")
    assert encode_event(event) == b"\x08\x01\x12\x09registrar\xc2\x01\x03\x0a\x017"


def test_an_event_whose_fields_are_all_defaults_still_records_its_kind() -> None:
    """A `PodRemoved` of empty names encodes its (empty) oneof field, so it decodes to a `PodRemoved`."""
    event = PodRemoved(observed_at=0, source="", namespace="", name="")
    assert encode_event(event) == b"\x62\x00"
    assert decode_event(b"\x62\x00") == event


def test_bytes_do_not_depend_on_map_insertion_order() -> None:
    """Two pods whose labels were inserted in opposite orders encode to the same bytes."""
    names = [f"label-{index}" for index in range(40)]
    forward = make_pod(labels={name: "x" for name in names}, annotations={"b": "2", "a": "1"})
    backward = make_pod(labels={name: "x" for name in reversed(names)}, annotations={"a": "1", "b": "2"})
    assert encode_event(pod_added(forward)) == encode_event(pod_added(backward))


def test_maps_are_written_as_sorted_pairs() -> None:
    """A string map crosses the wire as `StringPair`s sorted by key."""
    pod = make_pod(labels=immutables.Map({"zone": "a", "app": "web", "aether.io/managed": "true"}))
    message = event_to_proto(pod_added(pod))
    assert [(pair.key, pair.value) for pair in message.pod_added.pod.labels] == [
        ("aether.io/managed", "true"),
        ("app", "web"),
        ("zone", "a"),
    ]


def test_a_record_of_an_unknown_kind_raises_unknown_event_kind() -> None:
    """A record whose oneof field number this version does not know (99) raises `UnknownEventKind`."""
    base = log_pb2.Event(observed_at=1, source="future").SerializeToString()
    payload = base + b"\x9a\x06\x00"  # field 99, length-delimited, empty: a kind added by a newer version
    with pytest.raises(UnknownEventKind) as caught:
        decode_event(payload)
    assert caught.value.field_numbers == (99,)
    assert str(caught.value) == (
        "cannot decode event record: unknown event kind (oneof field numbers [99]);"
        " it was probably written by a newer version of aether"
    )


def test_an_empty_record_raises_codec_error_saying_it_has_no_kind() -> None:
    """Empty bytes parse as an event of no kind at all: a `CodecError`, not a newer version's kind."""
    with pytest.raises(CodecError, match=r"^cannot decode event record: it carries no event kind$") as caught:
        decode_event(b"")
    assert not isinstance(caught.value, UnknownEventKind)


def test_garbage_bytes_raise_codec_error() -> None:
    """Bytes that are no protobuf message raise `CodecError` naming the expected message."""
    with pytest.raises(
        CodecError, match=r"^cannot decode event record: not an aether\.log\.v1\.Event \(.*\)$"
    ) as caught:
        decode_event(b"\xff\xff\xff")
    assert not isinstance(caught.value, UnknownEventKind)
    assert caught.value.what == "event record"


def test_invalid_utf8_in_a_string_field_raises_codec_error() -> None:
    """A string field that is not UTF-8 raises `CodecError` rather than decoding."""
    payload = encode_event(PodRemoved(observed_at=1, source="cni", namespace="abc", name="x")).replace(
        b"abc", b"\xff\xfe\xfd"
    )
    with pytest.raises(
        CodecError, match=r"^cannot decode event record: not an aether\.log\.v1\.Event \(.*\)$"
    ):
        decode_event(payload)


def test_an_unknown_enum_value_raises_codec_error() -> None:
    """An enum value this version does not know (protocol 7) raises `CodecError` naming the kind and the value."""
    message = log_pb2.Event(observed_at=1, source="registrar")
    message.endpoint_removed.version = "1"
    message.endpoint_removed.protocol = 7  # type: ignore[assignment]
    with pytest.raises(
        CodecError,
        match=r"^cannot decode event record: endpoint_removed: enum value 7 is unknown"
        r" \(written by a newer version\?\)$",
    ):
        decode_event(message.SerializeToString())


def test_a_value_the_wire_type_cannot_hold_raises_codec_error() -> None:
    """A negative port cannot be a uint32: encoding raises `CodecError` naming the event, not a bare ValueError."""
    event = EndpointAdded(
        observed_at=1, source="test", version="1", endpoint=Endpoint(service="a/b", ip="10.0.0.1", port=-1)
    )
    with pytest.raises(CodecError, match=r"^cannot encode EndpointAdded: Value out of range: -1$"):
        encode_event(event)


def test_a_mesh_config_record_written_before_the_tracing_fields_reads_with_tracing_off() -> None:
    """A MeshConfigUpdated record of the four fields an older version wrote (no 5, 6) decodes with tracing off; a
    config with tracing off writes exactly those bytes, and a traced one round-trips."""
    old = log_pb2.Event(observed_at=1, source="kubernetes")
    old.mesh_config_updated.config.mesh_domain = "corp.mesh"
    old.mesh_config_updated.config.trust_domain = "corp"
    old.mesh_config_updated.config.on_demand_ttl_seconds = 30
    old.mesh_config_updated.config.generation = 2
    payload = old.SerializeToString(deterministic=True)
    event = decode_event(payload)
    assert isinstance(event, MeshConfigUpdated)
    assert (event.config.tracing_enabled, event.config.trace_sample_per_million) == (False, 0)
    assert encode_event(event) == payload
    traced = mesh_config_updated(make_mesh_config(tracing_enabled=True, trace_sample_per_million=250_000))
    assert decode_event(encode_event(traced)) == traced
