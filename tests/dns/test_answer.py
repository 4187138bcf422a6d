"""The sans-IO resolver core: answers, negative answers, EDNS, truncation, FORMERR, and the answer cache."""

from __future__ import annotations

import ipaddress
from types import MappingProxyType

import dnslib

from aether.dns import (
    Answered,
    Dropped,
    Forward,
    MeshRecords,
    MeshResolver,
    Transport,
    read_question,
    read_reply,
)


def records(names: dict[str, str], *, generation: int = 1) -> MeshRecords:
    addresses = {tuple(key.split("__")[::-1]): ipaddress.IPv4Address(value) for key, value in names.items()}
    return MeshRecords(generation=generation, written_at="", addresses=MappingProxyType(addresses))  # type: ignore[arg-type]


def loaded(**names: str) -> MeshResolver:
    resolver = MeshResolver(mesh_domain="aether.internal")
    resolver.replace_records(records(names or {"reviews__default": "10.96.0.10"}))
    return resolver


def query(name: str, qtype: str = "A", *, ident: int = 7, edns: int | None = None) -> bytes:
    request = dnslib.DNSRecord.question(name, qtype)
    request.header.id = ident
    if edns is not None:
        request.add_ar(dnslib.EDNS0(udp_len=edns))
    return bytes(request.pack())


def answer(
    resolver: MeshResolver, packet: bytes, *, transport: Transport = Transport.UDP, now: float = 0.0
) -> dnslib.DNSRecord:
    resolution = resolver.resolve(packet, transport=transport, now=now)
    assert isinstance(resolution, Answered)
    return dnslib.DNSRecord.parse(resolution.response)


def test_known_name_gets_its_a_record() -> None:
    """`reviews.default.aether.internal A` is answered with the record, AA set, TTL 5, ID kept."""
    reply = answer(loaded(), query("reviews.default.aether.internal", ident=4242))
    assert (reply.header.id, reply.header.aa, reply.header.rcode) == (4242, 1, 0)
    assert [(str(rr.rdata), rr.ttl) for rr in reply.rr] == [("10.96.0.10", 5)]


def test_names_are_case_insensitive_and_the_question_case_is_echoed() -> None:
    """`Reviews.DEFAULT...` resolves, and the reply echoes the query's spelling."""
    reply = answer(loaded(), query("Reviews.DEFAULT.aether.internal"))
    assert str(reply.q.qname) == "Reviews.DEFAULT.aether.internal."
    assert [str(rr.rdata) for rr in reply.rr] == ["10.96.0.10"]


def test_negative_answers() -> None:
    """Unknown names are NXDOMAIN; other types, the apex and a namespace with services are NODATA; all carry SOA."""
    resolver = loaded()
    cases = {
        ("nope.default.aether.internal", "A"): 3,
        ("a.reviews.default.aether.internal", "A"): 3,
        ("other.aether.internal", "A"): 3,
        ("reviews.default.aether.internal", "AAAA"): 0,
        ("default.aether.internal", "A"): 0,
        ("aether.internal", "SOA"): 0,
    }
    for (name, qtype), rcode in cases.items():
        reply = answer(resolver, query(name, qtype))
        assert (name, reply.header.rcode, reply.rr, [rr.rtype for rr in reply.auth]) == (name, rcode, [], [6])


def test_servfail_before_any_records() -> None:
    """Without records, mesh names get SERVFAIL (not NXDOMAIN, which clients would cache)."""
    reply = answer(MeshResolver(mesh_domain="aether.internal"), query("reviews.default.aether.internal"))
    assert (reply.header.rcode, reply.header.aa) == (2, 0)


def test_outside_names_are_forwarded_as_our_own_query() -> None:
    """A name outside the mesh domain comes back as `Forward`: our lowercase query, no client EDNS options."""
    packet = query("WWW.example.com", ident=99)
    forward = loaded().resolve(packet, transport=Transport.UDP, now=0.0)
    assert forward == Forward(
        key=b"\x03www\x07example\x03com\x00\x00\x01\x00\x01\x01\x00\x00\x00",
        query=b"\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03www\x07example\x03com\x00\x00\x01\x00\x01",
        question=read_question(packet),
    )
    evil = loaded().resolve(query("aether.internal.evil.com"), transport=Transport.UDP, now=0.0)
    assert isinstance(evil, Forward)


def test_edns_is_echoed_and_unknown_versions_get_badvers() -> None:
    """An OPT in the query gets our OPT back (payload 1232); EDNS version 1 gets BADVERS."""
    reply = answer(loaded(), query("reviews.default.aether.internal", edns=4096))
    assert [(rr.rtype, rr.rclass) for rr in reply.ar] == [(41, 1232)]
    request = dnslib.DNSRecord.question("reviews.default.aether.internal")
    request.add_ar(dnslib.EDNS0(version=1))
    bad = answer(loaded(), bytes(request.pack()))
    assert (bad.header.rcode, [(rr.ttl >> 24) & 0xFF for rr in bad.ar]) == (0, [1])
    outside = dnslib.DNSRecord.question("www.example.com")
    outside.add_ar(dnslib.EDNS0(version=1))
    assert [(rr.ttl >> 24) & 0xFF for rr in answer(loaded(), bytes(outside.pack())).ar] == [1]


def test_cache_hits_only_on_identical_bytes_after_the_id() -> None:
    """A new ID hits; a different case, EDNS or transport misses and still answers right."""
    resolver = loaded()
    answer(resolver, query("reviews.default.aether.internal", ident=1))
    second = answer(resolver, query("reviews.default.aether.internal", ident=2))
    assert (second.header.id, resolver.statistics().cache_hits) == (2, 1)
    upper = answer(resolver, query("REVIEWS.default.aether.internal", ident=3))
    with_edns = answer(resolver, query("reviews.default.aether.internal", ident=4, edns=1232))
    over_tcp = answer(resolver, query("reviews.default.aether.internal", ident=5), transport=Transport.TCP)
    assert str(upper.q.qname) == "REVIEWS.default.aether.internal."
    assert (len(with_edns.ar), len(over_tcp.ar)) == (1, 0)
    assert resolver.statistics().cache_hits == 1


def test_cache_is_dropped_when_records_change() -> None:
    """After `replace_records`, the same query gets the new address."""
    resolver = loaded()
    answer(resolver, query("reviews.default.aether.internal"))
    resolver.replace_records(records({"reviews__default": "10.96.0.99"}, generation=2))
    assert [str(rr.rdata) for rr in answer(resolver, query("reviews.default.aether.internal")).rr] == [
        "10.96.0.99"
    ]
    assert resolver.statistics().cache_entries == 1


def test_malformed_packets() -> None:
    """Runts and responses are dropped; a garbage body is FORMERR; two questions are FORMERR; IQUERY is NOTIMP."""
    resolver = loaded()
    assert resolver.resolve(b"\x00\x01", transport=Transport.UDP, now=0.0) == Dropped(
        reason="packet of 2 bytes is shorter than a DNS header"
    )
    response = bytes(dnslib.DNSRecord.question("x.example").reply().pack())
    assert resolver.resolve(response, transport=Transport.UDP, now=0.0) == Dropped(
        reason="packet is a response, not a query"
    )
    garbage = resolver.resolve(
        b"\x00\x09\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0", transport=Transport.UDP, now=0.0
    )
    assert isinstance(garbage, Answered)
    assert garbage.response == b"\x00\x09\x81\x01" + bytes(8)
    two = dnslib.DNSRecord.question("a.example")
    two.add_question(dnslib.DNSQuestion("b.example"))
    formerr = resolver.resolve(bytes(two.pack()), transport=Transport.UDP, now=0.0)
    assert isinstance(formerr, Answered)
    assert formerr.problem == (
        "query of 35 bytes: query must have 1 question and at most 1 OPT (got 2 and 0): answered FORMERR"
    )
    iquery = bytearray(query("reviews.default.aether.internal"))
    iquery[2] |= 0x08
    notimp = resolver.resolve(bytes(iquery), transport=Transport.UDP, now=0.0)
    assert isinstance(notimp, Answered)
    assert notimp.response[3] & 0xF == 4


def test_forwarded_reply_is_truncated_to_the_client_udp_size() -> None:
    """An upstream reply larger than the client's payload size becomes an empty TC answer over UDP only."""
    resolver = loaded()
    packet = query("big.example", edns=600)
    big = dnslib.DNSRecord.parse(packet).reply()
    for index in range(60):
        big.add_answer(dnslib.RR("big.example", rdata=dnslib.A(f"192.0.2.{index}")))
    reply = bytes(big.pack())
    question = read_question(packet)
    assert resolver.answer_from(packet, question, reply, transport=Transport.TCP) == reply
    truncated = dnslib.DNSRecord.parse(resolver.answer_from(packet, question, reply, transport=Transport.UDP))
    assert (truncated.header.tc, truncated.rr, len(truncated.ar)) == (1, [], 1)
    small = query("small.example")
    small_reply = bytes(dnslib.DNSRecord.parse(small).reply().pack())
    assert (
        resolver.answer_from(small, read_question(small), small_reply, transport=Transport.UDP) == small_reply
    )


def test_forwarded_answer_gets_the_client_id_and_spelling_and_ages() -> None:
    """A learned reply answers a question differing in ID and case, TTL counted down; DO or type differ: miss."""
    resolver = loaded()
    first = query("www.example.com", ident=1)
    forward = resolver.resolve(first, transport=Transport.UDP, now=100.0)
    assert isinstance(forward, Forward)
    upstream = dnslib.DNSRecord.parse(forward.query).reply()
    upstream.add_answer(dnslib.RR("www.example.com", rdata=dnslib.A("192.0.2.7"), ttl=60))
    resolver.learn(forward, read_reply(bytes(upstream.pack())), now=100.0)
    later = answer(resolver, query("WWW.Example.com", ident=2), now=110.5)
    assert (later.header.id, str(later.q.qname)) == (2, "WWW.Example.com.")
    assert [(str(rr.rdata), rr.ttl) for rr in later.rr] == [("192.0.2.7", 50)]
    assert isinstance(
        resolver.resolve(query("www.example.com", "AAAA"), transport=Transport.UDP, now=110.5), Forward
    )
    assert isinstance(resolver.resolve(query("www.example.com"), transport=Transport.UDP, now=160.0), Forward)
