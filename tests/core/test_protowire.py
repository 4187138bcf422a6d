"""Protobuf's wire format as Aether writes it by hand, checked against protobuf's own serializer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aether.core.protowire import length_delimited, varint
from aether.proto.log.v1 import log_pb2


def test_varints_encode_in_seven_bit_groups_low_first() -> None:
    assert [varint(0), varint(127), varint(128), varint(300), varint(2**21), varint(2**64 - 1)] == [
        b"\x00",
        b"\x7f",
        b"\x80\x01",
        b"\xac\x02",
        b"\x80\x80\x80\x01",
        b"\xff" * 9 + b"\x01",
    ]


@given(st.text(min_size=1, max_size=300))
def test_a_length_delimited_field_is_what_protobuf_serializes(text: str) -> None:
    # A (non-empty) string field is length-delimited: tag (number << 3 | 2), the length as a varint, the bytes.
    message = log_pb2.Endpoint(service=text)
    number = log_pb2.Endpoint.DESCRIPTOR.fields_by_name["service"].number
    assert length_delimited(number, text.encode()) == message.SerializeToString(deterministic=True)
