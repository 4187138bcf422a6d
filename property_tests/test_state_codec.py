"""Properties of the checkpoint's state codec: its endpoints, decoded as columns, are what the per-record decoder
gives, for any state a checkpoint may hold, and so is every payload that is not in the form `encode_state` writes."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aether.core.errors import CodecError
from aether.core.events import Record
from aether.core.protowire import length_delimited
from aether.core.reduce import fold_all
from aether.core.state import (
    EMPTY_STATE,
    RegistryState,
    State,
    decode_state,
    encode_state,
    state_from_proto,
)
from aether.proto.log.v1 import log_pb2
from property_tests.strategies import records, registry_states

PROPERTY = settings(max_examples=300, deadline=None)


def _per_record(payload: bytes) -> State:
    """What the per-record decoder gives for `payload`."""
    return state_from_proto(log_pb2.State.FromString(payload))


@PROPERTY
@given(records(max_size=8), registry_states(), st.integers(0, 2**64 - 1))
def test_decoding_a_checkpoint_gives_the_state_the_per_record_decoder_gives(
    items: tuple[Record, ...], registry: RegistryState, seq: int
) -> None:
    """Any state (an empty one, zero values, UNSPECIFIED protocols, records over a kilobyte) decodes to itself and
    to what the per-record decoder gives, and encodes to the same bytes; what `encode_state` writes is canonical
    (its own parse's bytes), so its endpoints are always decoded as columns."""
    state = attrs.evolve(fold_all(EMPTY_STATE, items), registry=registry, seq=seq)
    payload = encode_state(state)
    assert log_pb2.State.FromString(payload).SerializeToString(deterministic=True) == payload
    decoded = decode_state(payload)
    assert decoded == state
    assert decoded == _per_record(payload)
    assert encode_state(decoded) == payload


_MANGLINGS = (
    b"\x98\x06\x01",  # an unknown field (99, varint)
    length_delimited(1, b"other/svc"),  # the service written twice: the last one counts
    b"\x10\x02",  # the protocol written twice
    b"\x22\x02\x90\x3f",  # the port packed (another wire form: unknown to the schema)
    b"\x20\x00",  # the port written at its zero value, after its value
    b"\x10\x07",  # a protocol this version does not know
)


@PROPERTY
@given(registry_states(), st.data())
def test_a_payload_not_in_canonical_form_decodes_as_the_per_record_decoder_reads_it(
    registry: RegistryState, data: st.DataObject
) -> None:
    """An endpoint holding an unknown field, a field twice, a packed port or an explicit zero (which columns could
    misalign) decodes exactly as the per-record decoder reads it; an unknown enum value is a `CodecError`."""
    message = log_pb2.State.FromString(encode_state(attrs.evolve(EMPTY_STATE, registry=registry)))
    endpoints = [endpoint.SerializeToString() for endpoint in message.registry.endpoints]
    if endpoints:
        index = data.draw(st.integers(0, len(endpoints) - 1))
        endpoints[index] += data.draw(st.sampled_from(_MANGLINGS))
    del message.registry.endpoints[:]
    registry_bytes = message.registry.SerializeToString() + b"".join(
        length_delimited(4, item) for item in endpoints
    )
    message.ClearField("registry")
    payload = message.SerializeToString() + length_delimited(3, registry_bytes)
    try:
        expected = _per_record(payload)
    except KeyError:  # the protocol this version does not know
        with pytest.raises(CodecError, match=_UNKNOWN_PROTOCOL):
            decode_state(payload)
    else:
        assert decode_state(payload) == expected


_UNKNOWN_PROTOCOL = (
    r"^cannot decode checkpoint state: enum value 7 is unknown \(written by a newer version\?\)$"
)
