"""Tests of `aether.core.events.batch`: runs of endpoint-upsert records decoded as columns, or not at all."""

from __future__ import annotations

import re

import pytest

from aether.core.events import (
    Endpoint,
    EndpointAdded,
    EndpointRemoved,
    EndpointUpdated,
    Event,
    Health,
    Protocol,
    decode_event,
    decode_for_fold,
    decode_upsert_batch,
    decode_upsert_endpoint,
    encode_event,
)
from aether.core.events import batch as batch_module
from aether.core.events.batch import decode_state_endpoints, decode_upsert_endpoints
from aether.core.events.codec import CodecError
from aether.core.events.wire import plan_for
from aether.proto.log.v1 import log_pb2


def _updated(index: int, **fields: object) -> EndpointUpdated:
    values: dict[str, object] = {
        "service": f"default/svc{index % 3}",
        "ip": f"10.0.0.{index + 1}",
        "weight": index + 1,
    }
    endpoint = Endpoint(**{**values, **fields})  # type: ignore[arg-type]
    return EndpointUpdated(
        observed_at=100 + index, source="registrar", version=str(index + 1), endpoint=endpoint
    )


def _payloads(events: list[Event]) -> list[bytes]:
    return [encode_event(event) for event in events]


def _field(number: int, body: bytes) -> bytes:
    assert len(body) < 128
    tag = number << 3 | 2
    return (bytes([tag]) if tag < 128 else bytes([tag & 0x7F | 0x80, tag >> 7])) + bytes([len(body)]) + body


def test_a_run_of_upserts_decodes_to_the_columns_each_record_holds() -> None:
    """Each column lists, in record order, the field each record decodes to on its own."""
    events: list[Event] = [_updated(index, ports=(9000, 9001) if index == 2 else ()) for index in range(5)]
    batch = decode_upsert_batch(_payloads(events))
    assert batch is not None
    assert len(batch) == 5
    assert batch.kind is EndpointUpdated
    one_by_one = [decode_for_fold(payload) for payload in _payloads(events)]
    assert batch.versions == [pending.version for pending in one_by_one]  # type: ignore[union-attr]
    assert batch.services == [pending.service for pending in one_by_one]  # type: ignore[union-attr]
    assert batch.ips == [pending.ip for pending in one_by_one]  # type: ignore[union-attr]
    assert batch.protocols == [Protocol.HTTP] * 5
    assert batch.ports == [8080] * 5
    assert batch.weights == [1, 2, 3, 4, 5]
    assert batch.extra_ports == [(), (), (9000, 9001), (), ()]
    assert batch.events() == events
    assert batch.observed_at == 104
    assert decode_upsert_endpoint(batch.payloads[2]) == events[2].endpoint  # type: ignore[attr-defined]


def test_a_run_without_extra_ports_has_no_ports_column() -> None:
    batch = decode_upsert_batch(_payloads([_updated(index) for index in range(3)]))
    assert batch is not None
    assert batch.extra_ports is None


def test_a_run_of_added_endpoints_decodes_as_added() -> None:
    events: list[Event] = [
        EndpointAdded(observed_at=1, source="registrar", version="7", endpoint=_updated(index).endpoint)
        for index in range(3)
    ]
    batch = decode_upsert_batch(_payloads(events))
    assert batch is not None
    assert batch.kind is EndpointAdded
    assert batch.events() == events


def _not_taken(payloads: list[bytes]) -> None:
    assert decode_upsert_batch(payloads) is None


def test_no_records_is_no_batch() -> None:
    _not_taken([])


def test_a_batch_of_two_kinds_is_not_taken() -> None:
    added = EndpointAdded(observed_at=1, source="registrar", version="7", endpoint=_updated(0).endpoint)
    _not_taken(_payloads([_updated(1), added, _updated(2)]))


def test_a_batch_holding_another_event_kind_is_not_taken() -> None:
    removed = EndpointRemoved(
        observed_at=1, source="registrar", version="3", service="default/svc0", ip="10.0.0.1"
    )
    _not_taken(_payloads([_updated(1), removed, _updated(2)]))


@pytest.mark.parametrize(
    "fields",
    [{"protocol": Protocol.UNSPECIFIED}, {"port": 0}, {"weight": 0}],
    ids=["protocol-unspecified", "port-zero", "weight-zero"],
)
def test_a_record_omitting_a_field_at_its_default_is_not_taken(fields: dict[str, object]) -> None:
    """The columns would no longer line up with the records: the caller decodes them one by one."""
    _not_taken(_payloads([_updated(0), _updated(1, **fields), _updated(2)]))


def test_a_record_holding_a_field_twice_is_not_taken() -> None:
    """Two records' bytes back to back parse as one record holding every field twice (the last one counts)."""
    first, second, third = _payloads([_updated(0), _updated(1), _updated(2)])
    _not_taken([first, second + third])


def test_a_record_with_a_scalar_field_in_packed_form_is_not_taken() -> None:
    """A singular field in another wire form is an unknown field to the schema (the port decodes as 0): the column
    view, which reads it as a repeated field, must not take it."""
    endpoint = log_pb2.Endpoint(service="default/svc0", protocol=1, ip="10.0.0.1", weight=3)
    body = b"\x0a\x015" + _field(2, endpoint.SerializeToString() + _field(4, b"\x90\x3f"))
    odd = _field(22, body)
    decoded = decode_event(odd)
    assert isinstance(decoded, EndpointUpdated)
    assert decoded.endpoint.port == 0
    _not_taken([encode_event(_updated(0)), odd])


def test_a_record_with_an_unknown_field_is_not_taken() -> None:
    _not_taken([encode_event(_updated(0)), encode_event(_updated(1)) + _field(99, b"x")])


def test_a_truncated_record_is_not_taken_even_when_its_bytes_would_run_into_the_next() -> None:
    """Each record is framed on its own: a record whose last field is cut short cannot take the next record's bytes."""
    first, second = _payloads([_updated(0), _updated(1)])
    _not_taken([first + b"\x12\x40", second])


def test_a_record_that_is_not_utf8_is_not_taken() -> None:
    payload = encode_event(_updated(0, region="eu"))
    _not_taken([payload.replace(b"eu", b"\xff\xfe")])


def test_a_record_with_an_unknown_health_is_not_taken() -> None:
    message = log_pb2.Event()
    message.ParseFromString(encode_event(_updated(0, health=Health.HEALTHY)))
    message.endpoint_updated.endpoint.health = 9
    _not_taken([message.SerializeToString()])


def test_a_record_with_an_unknown_protocol_is_not_taken() -> None:
    message = log_pb2.Event()
    message.ParseFromString(encode_event(_updated(0)))
    message.endpoint_updated.endpoint.protocol = 9
    _not_taken([message.SerializeToString()])


def test_a_record_whose_extra_port_is_the_marker_is_not_taken() -> None:
    """Where each record's ports start is told by a zero marker: a record listing port 0 is decoded one by one."""
    _not_taken(_payloads([_updated(0, ports=(0,)), _updated(1)]))


def test_a_record_too_long_to_frame_from_the_table_is_not_taken() -> None:
    _not_taken(_payloads([_updated(0, region="r" * 5000)]))


def test_endpoints_built_together_equal_each_record_decoded_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parsed a stretch at a time (here 3 records), with a record too long for the frame table in one stretch."""
    monkeypatch.setattr(batch_module, "_ENDPOINTS_AT_ONCE", 3)
    events: list[Event] = [_updated(index, ports=(9000,) if index == 1 else ()) for index in range(7)]
    events[4] = _updated(4, region="r" * 5000)
    events.append(
        EndpointAdded(observed_at=1, source="registrar", version="9", endpoint=_updated(8).endpoint)
    )
    payloads = _payloads(events)
    assert decode_upsert_endpoints(payloads) == [decode_upsert_endpoint(payload) for payload in payloads]
    assert decode_upsert_endpoints([]) == []


@pytest.mark.parametrize(
    "bad",
    [
        encode_event(
            EndpointRemoved(
                observed_at=1,
                source="registrar",
                version="2",
                service="default/a",
                protocol=Protocol.HTTP,
                ip="10.0.0.1",
            )
        ),
        b"\x12\x40",
    ],
    ids=["another kind", "truncated"],
)
def test_endpoints_built_together_raise_the_error_of_the_record_at_fault(bad: bytes) -> None:
    payloads = [*_payloads([_updated(0), _updated(1)]), bad]
    with pytest.raises(CodecError) as expected:
        decode_upsert_endpoint(bad)
    with pytest.raises(CodecError, match=re.escape(str(expected.value))):
        decode_upsert_endpoints(payloads)


def test_a_states_endpoints_built_as_columns_equal_each_one_decoded_on_its_own() -> None:
    """Fields every endpoint sets, none sets and some set (region, ports, labels, a zero port, an UNSPECIFIED
    protocol) are each read right: the columns give what `decode_nested` gives for each endpoint."""
    endpoints = [
        Endpoint(service="default/web", ip="10.0.0.1", region="eu", labels={"app": "web"}),
        Endpoint(service="default/web", ip="10.0.0.2", protocol=Protocol.UNSPECIFIED, port=0, ports=(1, 2)),
        Endpoint(service="shop/db", ip="10.0.1.1", health=Health.DRAINING, metadata={"a": "1", "b": ""}),
    ]
    message = log_pb2.State()
    for endpoint in endpoints:
        plan_for(Endpoint).encode_into(endpoint, message.registry.endpoints.add())
    payload = message.SerializeToString(deterministic=True)
    parsed = log_pb2.State.FromString(payload).registry.endpoints
    decoded = decode_state_endpoints(payload, parsed)
    assert decoded.values == endpoints
    assert [plan_for(Endpoint).decode_nested(item) for item in parsed] == endpoints
    assert (decoded.fields["service"], decoded.fields["protocol"], decoded.fields["port"]) == (
        ["default/web", "default/web", "shop/db"],
        [Protocol.HTTP, Protocol.UNSPECIFIED, Protocol.HTTP],
        [8080, 0, 8080],
    )
