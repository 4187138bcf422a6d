"""Fuzz target of mesh-dns's parsers: any query packet, upstream reply or record file gives an answer, a drop or the
documented refusal, never another exception (the server's receive loop has no handler of its own for them)."""

from __future__ import annotations

import contextlib
import json

import dnslib
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aether.dns.answer import Answered, Dropped, Forward, MeshResolver, Transport
from aether.dns.errors import WireFormatError
from aether.dns.records import parse_records
from aether.dns.wire import read_reply

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MESH_DOMAIN = "aether.internal"
RECORDS = json.dumps(
    {"writtenAt": "2026-12-01T00:00:00Z", "generation": 1, "records": {"shop/cart": "10.0.0.7"}}
).encode()


def _query(name: str, qtype: str) -> bytes:
    return bytes(dnslib.DNSRecord.question(name, qtype).pack())


def _mangled(packet: bytes, data: st.DataObject) -> bytes:
    """`packet` with some bytes replaced and possibly cut short: close enough to parse far, wrong somewhere."""
    mutable = bytearray(packet)
    for index in data.draw(st.lists(st.integers(0, max(len(mutable) - 1, 0)), max_size=4)):
        if mutable:
            mutable[index] = data.draw(st.integers(0, 255))
    return bytes(mutable[: data.draw(st.integers(0, len(mutable)))])


def _resolver() -> MeshResolver:
    resolver = MeshResolver(mesh_domain=MESH_DOMAIN)
    resolver.replace_records(parse_records(RECORDS).records)
    return resolver


NAMES = st.sampled_from(["cart.shop.aether.internal", "nope.shop.aether.internal", "example.org", "a.b"])
TYPES = st.sampled_from(["A", "AAAA", "TXT", "ANY", "SOA"])


@FUZZ
@given(packet=st.binary(max_size=600), transport=st.sampled_from(Transport))
@example(packet=b"", transport=Transport.UDP)
@example(packet=b"\x00" * 12, transport=Transport.TCP)
@example(
    packet=b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01",
    transport=Transport.UDP,
)
def test_any_query_bytes_get_an_answer_a_forward_or_a_drop(packet: bytes, transport: Transport) -> None:
    resolution = _resolver().resolve(packet, transport=transport, now=0.0)
    assert isinstance(resolution, Answered | Forward | Dropped)
    if isinstance(resolution, Answered):
        assert resolution.response[:2] == packet[:2]  # the answer carries the query's ID


@FUZZ
@given(name=NAMES, qtype=TYPES, transport=st.sampled_from(Transport), data=st.data())
def test_mangled_queries_get_an_answer_a_forward_or_a_drop(
    name: str, qtype: str, transport: Transport, data: st.DataObject
) -> None:
    packet = _mangled(_query(name, qtype), data)
    assert isinstance(_resolver().resolve(packet, transport=transport, now=0.0), Answered | Forward | Dropped)


@FUZZ
@given(name=NAMES, qtype=TYPES, data=st.data())
def test_any_upstream_reply_is_read_or_refused_as_wire_format(
    name: str, qtype: str, data: st.DataObject
) -> None:
    """An upstream's reply, however broken, is read whole or refused with `WireFormatError` (then SERVFAIL)."""
    reply = dnslib.DNSRecord.question(name, qtype).reply()
    reply.add_answer(*dnslib.RR.fromZone(f"{name} 60 A 10.1.2.3"))
    packet = data.draw(st.one_of(st.just(bytes(reply.pack())), st.binary(max_size=300)))
    packet = _mangled(packet, data) if data.draw(st.booleans()) else packet
    with contextlib.suppress(WireFormatError):
        read_reply(packet)


@FUZZ
@given(content=st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode)))
@example(content=b'{"generation": 1e400, "records": {"a/b": "10.0.0.1"}}')
@example(content=b'{"records": {"a/b": 7, "c": "x", "d/e": "999.1.1.1"}}')
@example(content=b"[" * 100_000)
def test_any_record_file_is_read_or_refused_with_a_message(content: bytes) -> None:
    """A record file is read (bad entries skipped, each with a message) or refused with `ValueError`."""
    try:
        messages = parse_records(content).skipped
    except ValueError as refusal:
        messages = (str(refusal),)
    assert all(isinstance(message, str) and message for message in messages)
