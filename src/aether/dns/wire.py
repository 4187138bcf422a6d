"""DNS wire format, read and written by hand where speed matters: the question of a query, the shape of a reply
(its rcode, TC bit, TTL fields and RFC 2308 negative TTL), and the queries mesh-dns sends upstream (pure)."""

from __future__ import annotations

import struct

import attrs

from aether.dns.errors import WireFormatError

HEADER = struct.Struct("!HHHHHH")
_TYPE_CLASS = struct.Struct("!HH")
_RR_FIXED = struct.Struct("!HHIH")
"""An RR after its owner name: type, class, TTL, RDLENGTH (RFC 1035 4.1.3)."""
_U32 = struct.Struct("!I")
FLAG_QR = 0x8000
FLAG_OPCODE = 0x7800
FLAG_TC = 0x0200
FLAG_RD = 0x0100
FLAG_RA = 0x0080
FLAG_AD = 0x0020
FLAG_CD = 0x0010
TYPE_OPT = 41
TYPE_SOA = 6
RCODE_NOERROR = 0
RCODE_NXDOMAIN = 3
EDNS_PAYLOAD_SIZE = 1232
"""The UDP payload size we advertise: the DNS Flag Day 2020 value, safe against IP fragmentation."""
MIN_UDP_PAYLOAD = 512
"""RFC 1035 4.2.1: the UDP size every client accepts; RFC 6891 6.2.5 treats smaller EDNS values as 512."""
_EDNS_DO = 0x8000
"""The DO bit in the OPT TTL field's flags half (RFC 3225)."""
_FORWARDED_FLAGS = FLAG_RD | FLAG_AD | FLAG_CD
"""Query flags that shape an upstream's answer, so they go upstream and into the cache key (RFC 6840 5.7-5.9)."""
_KEY_EDNS = 0x01
_KEY_DO = 0x02


@attrs.frozen(kw_only=True)
class Question:
    """The one question of a query, with the header flags and EDNS fields that shape its answer."""

    name: bytes
    """The query name in wire format, spelled as asked."""
    qtype: int
    qclass: int
    flags: int
    """The query's header flags word."""
    end: int
    """Offset of the first byte after the question section."""
    edns_payload: int | None
    """The OPT record's UDP payload size, or None when the query has no OPT."""
    edns_version: int
    dnssec_ok: bool

    @property
    def udp_limit(self) -> int:
        """The largest UDP answer the client accepts (RFC 6891 6.2.5)."""
        return MIN_UDP_PAYLOAD if self.edns_payload is None else max(MIN_UDP_PAYLOAD, self.edns_payload)

    def cache_key(self) -> bytes:
        """What an upstream's answer depends on: the name (case folded), type, class, RD/AD/CD, EDNS and DO.

        Invariant: two questions with the same key get the same upstream answer (bar ID and name case), so a
        cached answer is served only to a question it answers; any other difference is a miss.
        """
        bits = (_KEY_EDNS if self.edns_payload is not None else 0) | (_KEY_DO if self.dnssec_ok else 0)
        return (
            self.name.lower()
            + _TYPE_CLASS.pack(self.qtype, self.qclass)
            + _TYPE_CLASS.pack(self.flags & _FORWARDED_FLAGS, bits)
        )


def read_question(query: bytes) -> Question:
    """Read the header, the single question and the OPT record (if any) of `query`.

    Raises:
        WireFormatError: the packet is cut short, has a compressed or over-long question name, or does not
            have exactly one question and at most one OPT record.
    """
    if len(query) < HEADER.size:
        raise WireFormatError(reason=f"packet of {len(query)} bytes is shorter than a DNS header")
    _, flags, questions, answers, authorities, additionals = HEADER.unpack_from(query)
    offset = end = HEADER.size
    for index in range(questions):
        offset = _name_end(query, offset, allow_pointer=index > 0) + _TYPE_CLASS.size
        if offset > len(query):
            raise WireFormatError(reason="question cut short")
        if index == 0:
            end = offset
    options: list[tuple[int, int]] = []
    for index in range(answers + authorities + additionals):
        offset = _name_end(query, offset, allow_pointer=True)
        if offset + _RR_FIXED.size > len(query):
            raise WireFormatError(reason="record cut short")
        rtype, rclass, ttl, length = _RR_FIXED.unpack_from(query, offset)
        offset += _RR_FIXED.size + length
        if offset > len(query):
            raise WireFormatError(reason="record data cut short")
        if rtype == TYPE_OPT and index >= answers + authorities:
            options.append((rclass, ttl))
    if questions != 1 or len(options) > 1:
        raise WireFormatError(
            reason=f"query must have 1 question and at most 1 OPT (got {questions!r} and {len(options)!r})"
        )
    qtype, qclass = _TYPE_CLASS.unpack_from(query, end - _TYPE_CLASS.size)
    payload, option_ttl = options[0] if options else (None, 0)
    return Question(
        name=query[HEADER.size : end - _TYPE_CLASS.size],
        qtype=qtype,
        qclass=qclass,
        flags=flags,
        end=end,
        edns_payload=payload,
        edns_version=(option_ttl >> 16) & 0xFF,
        dnssec_ok=bool(option_ttl & _EDNS_DO),
    )


def in_zone(name: bytes, zone: bytes) -> bool:
    """Whether the wire-format `name` is `zone` (wire format, lowercase) or below it, case-insensitively."""
    if len(name) < len(zone):
        return False
    folded = name.lower()
    offset = 0
    while offset < len(folded):
        if len(folded) - offset == len(zone):
            return folded[offset:] == zone
        offset += folded[offset] + 1
    return False


def to_wire_name(text: str) -> bytes:
    """The wire format of the dotted name `text` (ASCII labels)."""
    labels = [label for label in text.strip(".").split(".") if label]
    return b"".join(bytes([len(label)]) + label.encode("ascii") for label in labels) + b"\x00"


def upstream_query(question: Question) -> bytes:
    """The query mesh-dns sends upstream for `question` (ID 0: the forwarder sets it).

    It asks what the client asked, in lowercase, with the client's RD/AD/CD and DO, and with an OPT of our own
    payload size when the client sent one: the client's EDNS options (cookies, padding) are hop-by-hop and stay
    with the client, so one upstream answer can serve every client whose question has the same cache key.
    """
    edns = question.edns_payload is not None
    header = HEADER.pack(0, question.flags & _FORWARDED_FLAGS, 1, 0, 0, 1 if edns else 0)
    body = question.name.lower() + _TYPE_CLASS.pack(question.qtype, question.qclass)
    if edns:
        body += b"\x00" + _RR_FIXED.pack(
            TYPE_OPT, EDNS_PAYLOAD_SIZE, _EDNS_DO if question.dnssec_ok else 0, 0
        )
    return header + body


@attrs.frozen(kw_only=True)
class Reply:
    """A reply read far enough to cache it: its rcode, TC bit, question, and where its TTLs are."""

    message: bytes
    rcode: int
    truncated: bool
    question: bytes
    """The question section as the reply spells it (name, type, class)."""
    answers: int
    ttls: tuple[tuple[int, int], ...]
    """`(offset, ttl)` of the TTL field of every record but OPT, so a cached copy can count them down."""
    negative_ttl: int | None
    """RFC 2308 5: the smaller of the SOA's TTL and its MINIMUM, for the first SOA in the authority section."""


def read_reply(message: bytes) -> Reply:
    """Walk every record of the response `message`.

    Raises:
        WireFormatError: the packet is not a response, or is cut short or malformed anywhere.
    """
    if len(message) < HEADER.size:
        raise WireFormatError(reason=f"reply of {len(message)} bytes is shorter than a DNS header")
    _, flags, questions, answers, authorities, additionals = HEADER.unpack_from(message)
    if not flags & FLAG_QR:
        raise WireFormatError(reason="reply is a query")
    if questions != 1:
        raise WireFormatError(reason=f"reply must echo 1 question (got {questions!r})")
    end = _name_end(message, HEADER.size, allow_pointer=False) + _TYPE_CLASS.size
    if end > len(message):
        raise WireFormatError(reason="reply question cut short")
    ttls: list[tuple[int, int]] = []
    negative_ttl = None
    offset = end
    for index in range(answers + authorities + additionals):
        offset = _name_end(message, offset, allow_pointer=True)
        if offset + _RR_FIXED.size > len(message):
            raise WireFormatError(reason="reply record cut short")
        rtype, _, ttl, length = _RR_FIXED.unpack_from(message, offset)
        data_end = offset + _RR_FIXED.size + length
        if data_end > len(message):
            raise WireFormatError(reason="reply record data cut short")
        if rtype != TYPE_OPT:
            ttls.append((offset + 4, ttl))
        if rtype == TYPE_SOA and negative_ttl is None and answers <= index < answers + authorities:
            if length < 22:  # two names of at least one byte each, then five 32-bit fields
                raise WireFormatError(reason="reply SOA record too short")
            negative_ttl = min(ttl, _U32.unpack_from(message, data_end - 4)[0])
        offset = data_end
    if offset != len(message):
        raise WireFormatError(reason=f"reply has {len(message) - offset!r} bytes after its last record")
    return Reply(
        message=message,
        rcode=flags & 0xF,
        truncated=bool(flags & FLAG_TC),
        question=message[HEADER.size : end],
        answers=answers,
        ttls=tuple(ttls),
        negative_ttl=negative_ttl,
    )


def empty_reply(query: bytes, question: Question, *, rcode: int, truncated: bool = False) -> bytes:
    """An answer to `query` with no records: `rcode` (above 15, its upper bits go in our OPT, RFC 6891 6.1.3),
    TC set when `truncated` (so the client retries over TCP, RFC 7766 5), and our OPT when the client sent one."""
    edns = question.edns_payload is not None
    flags = FLAG_QR | FLAG_RA | (question.flags & (FLAG_OPCODE | FLAG_RD | FLAG_CD)) | (rcode & 0xF)
    if truncated:
        flags |= FLAG_TC
    header = HEADER.pack(HEADER.unpack_from(query)[0], flags, 1, 0, 0, 1 if edns else 0)
    body = query[HEADER.size : question.end]
    if edns:
        body += b"\x00" + _RR_FIXED.pack(TYPE_OPT, EDNS_PAYLOAD_SIZE, (rcode >> 4) << 24, 0)
    return header + body


def question_section(query: bytes) -> bytes:
    """The question section (name, type, class) of a query whose first question name is uncompressed.

    Raises:
        WireFormatError: the packet is cut short or its question name is compressed.
    """
    end = _name_end(query, HEADER.size, allow_pointer=False) + _TYPE_CLASS.size
    if end > len(query):
        raise WireFormatError(reason="question cut short")
    return query[HEADER.size : end]


def _name_end(packet: bytes, offset: int, *, allow_pointer: bool) -> int:
    """The offset just after the (possibly compressed) name starting at `offset`."""
    size = 0
    while True:
        if offset >= len(packet):
            raise WireFormatError(reason="name runs past the end of the packet")
        length = packet[offset]
        if length == 0:
            return offset + 1
        if length & 0xC0 == 0xC0:
            if not allow_pointer:
                raise WireFormatError(reason="question name is compressed")
            if offset + 2 > len(packet):
                raise WireFormatError(reason="name pointer cut short")
            return offset + 2  # the pointer's target was written earlier in the packet; we never follow it
        if length & 0xC0:
            raise WireFormatError(reason=f"label type {length >> 6!r} is not supported")
        size += length + 1
        if size > 255:
            raise WireFormatError(reason="name is longer than 255 bytes")
        offset += length + 1
