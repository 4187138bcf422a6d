"""The hand-written DNS wire reader and writer: questions, reply shapes, upstream queries, empty replies."""

from __future__ import annotations

import re

import dnslib
import pytest

from aether.dns import Question, WireFormatError, read_question, read_reply, upstream_query
from aether.dns.wire import empty_reply, in_zone, to_wire_name


def packet(name: str, qtype: str = "A", *, edns: int | None = None, dnssec_ok: bool = False) -> bytes:
    request = dnslib.DNSRecord.question(name, qtype)
    request.header.id = 0x1234
    if edns is not None:
        request.add_ar(dnslib.EDNS0(udp_len=edns, flags="do" if dnssec_ok else ""))
    return bytes(request.pack())


def test_read_question_keeps_the_spelling_and_reads_edns() -> None:
    """The name as asked, type, class, flags, the OPT payload size and the DO bit."""
    query = packet("WWW.example", "AAAA", edns=4096, dnssec_ok=True)
    assert read_question(query) == Question(
        name=b"\x03WWW\x07example\x00",
        qtype=28,
        qclass=1,
        flags=0x0100,
        end=29,
        edns_payload=4096,
        edns_version=0,
        dnssec_ok=True,
    )
    assert read_question(packet("www.example")).udp_limit == 512
    assert read_question(packet("www.example", edns=100)).udp_limit == 512


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        (
            b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01",
            "question name is compressed",
        ),
        (b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03ww", "name runs past the end of the packet"),
        (b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01", "question cut short"),
        (b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x01\x00\x00\x01\x00\x01\x00", "record cut short"),
    ],
)
def test_read_question_refuses_malformed_packets(query: bytes, reason: str) -> None:
    """Each defect is named."""
    with pytest.raises(WireFormatError, match=rf"^{reason}$"):
        read_question(query)


def test_in_zone_matches_whole_labels_case_insensitively() -> None:
    """`X.Aether.Internal` is in the zone; `xaether.internal` and `aether.internal.evil` are not."""
    zone = to_wire_name("aether.internal")
    assert in_zone(to_wire_name("X.Aether.Internal"), zone)
    assert in_zone(zone, zone)
    assert not in_zone(to_wire_name("xaether.internal"), zone)
    assert not in_zone(to_wire_name("aether.internal.evil"), zone)


def test_upstream_query_is_lowercase_with_our_own_opt() -> None:
    """Our query: ID 0, the client's RD, lowercase name, an OPT of 1232 with the client's DO and no options."""
    sent = dnslib.DNSRecord.parse(
        upstream_query(read_question(packet("WWW.Example", edns=4096, dnssec_ok=True)))
    )
    assert (sent.header.id, sent.header.rd, str(sent.q.qname)) == (0, 1, "www.example.")
    assert [(rr.rtype, rr.rclass, rr.ttl, rr.rdata) for rr in sent.ar] == [(41, 1232, 0x8000, [])]
    assert dnslib.DNSRecord.parse(upstream_query(read_question(packet("a.example")))).ar == []


def test_read_reply_finds_every_ttl_and_the_negative_ttl() -> None:
    """TTL offsets of every record but OPT; the negative TTL is min(SOA TTL, MINIMUM)."""
    reply = dnslib.DNSRecord.parse(packet("gone.example", edns=1232)).reply()
    reply.header.rcode = 3
    soa = dnslib.SOA("ns.example.", "hostmaster.example.", (1, 3600, 600, 86400, 30))
    reply.add_auth(dnslib.RR("example.", dnslib.QTYPE.SOA, rdata=soa, ttl=300))
    message = bytes(reply.pack())
    shape = read_reply(message)
    assert (shape.rcode, shape.truncated, shape.answers, shape.negative_ttl) == (3, False, 0, 30)
    assert [(message[offset : offset + 4], ttl) for offset, ttl in shape.ttls] == [(b"\x00\x00\x01\x2c", 300)]


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"\x00\x01\x81\x80", "reply of 4 bytes is shorter than a DNS header"),
        (b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01", "reply is a query"),
        (b"\x00\x01\x81\x80\x00\x00\x00\x00\x00\x00\x00\x00", "reply must echo 1 question (got 0)"),
        (
            b"\x00\x01\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x00\x00\x01\x00\x01\x00\x00\x01",
            "reply record cut short",
        ),
        (
            b"\x00\x01\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01\xff",
            "reply has 1 bytes after its last record",
        ),
    ],
)
def test_read_reply_refuses_junk(message: bytes, reason: str) -> None:
    """Each defect is named."""
    with pytest.raises(WireFormatError, match=rf"^{re.escape(reason)}$"):
        read_reply(message)


def test_empty_reply_carries_the_question_and_extended_rcodes_in_our_opt() -> None:
    """SERVFAIL keeps ID and question; BADVERS (16) puts its upper bits in the OPT; TC sets the flag."""
    query = packet("www.example", edns=4096)
    question = read_question(query)
    servfail = dnslib.DNSRecord.parse(empty_reply(query, question, rcode=2))
    assert (servfail.header.id, servfail.header.rcode, str(servfail.q.qname)) == (0x1234, 2, "www.example.")
    badvers = dnslib.DNSRecord.parse(empty_reply(query, question, rcode=16))
    assert (badvers.header.rcode, [(rr.ttl >> 24, rr.rclass) for rr in badvers.ar]) == (0, [(1, 1232)])
    assert dnslib.DNSRecord.parse(empty_reply(query, question, rcode=0, truncated=True)).header.tc == 1
