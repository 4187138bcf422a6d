"""The sans-IO resolver core: query bytes plus the mesh records in, answer bytes (or "forward this") out.

Answers for mesh names are cached as bytes keyed on the transport and the query after its 2-byte ID, so a
repeated query costs one dict lookup; the cache is dropped whenever the records change.
"""

from __future__ import annotations

import enum
import struct

import attrs
import dnslib

from aether.dns.records import MeshRecords

RECORD_TTL = 5
"""TTL of mesh A answers: short, because services move; clients re-ask often and the cache makes that cheap."""
NEGATIVE_TTL = 5
"""SOA minimum for NXDOMAIN/NODATA: the same as `RECORD_TTL`, so a new service is visible within seconds."""
EDNS_PAYLOAD_SIZE = 1232
"""The UDP payload size we advertise: the DNS Flag Day 2020 value, safe against IP fragmentation."""
MIN_UDP_PAYLOAD = 512
"""RFC 1035 4.2.1: the UDP size every client accepts; RFC 6891 6.2.5 treats smaller EDNS values as 512."""
CACHE_MAX_ENTRIES = 50_000
"""Bound on cached answers: a mesh has at most a few thousand names times a few query shapes; when full,
the cache is cleared rather than evicted piecemeal (a miss is only a parse)."""

_HEADER = struct.Struct("!HHHHHH")
_FLAG_QR = 0x8000
_FLAG_OPCODE = 0x7800
_FLAG_RD = 0x0100
_RCODE_FORMERR = 1
_RCODE_NOTIMP = 4
_TYPE_OPT = 41
_CLASS_IN = 1
_CLASS_ANY = 255
_BADVERS = 16


class Transport(enum.Enum):
    """How the query arrived; over UDP an answer may have to be truncated."""

    UDP = b"u"
    TCP = b"t"


@attrs.frozen(kw_only=True)
class Answered:
    """Send `response` back to the client."""

    response: bytes
    problem: str | None = None
    """Why the query was refused as malformed (FORMERR/NOTIMP), for the adapter to log; None for answers."""


@attrs.frozen(kw_only=True)
class Forward:
    """The name is outside the mesh domain: send `query` to an upstream, then pass the reply to `fit_reply`."""

    query: bytes


@attrs.frozen(kw_only=True)
class Dropped:
    """Send nothing: the packet is not a query we can answer (too short to carry an ID, or a response)."""

    reason: str


Resolution = Answered | Forward | Dropped


@attrs.frozen(kw_only=True)
class ResolverStatistics:
    """Counters of one `MeshResolver`."""

    generation: int | None
    """The generation of the records in use, or None before any record file was loaded."""
    names: int
    cache_entries: int
    cache_hits: int
    cache_misses: int


class MeshResolver:
    """Answer DNS queries for `<service>.<namespace>.<mesh_domain>` from `MeshRecords`.

    Every name under the mesh domain is answered authoritatively: A records for known services,
    NODATA for other types of a known name (or of a namespace that has services), NXDOMAIN otherwise,
    and SERVFAIL while no records have been loaded. Everything else is returned as `Forward`.
    """

    def __init__(self, *, mesh_domain: str) -> None:
        self._domain = tuple(mesh_domain.lower().strip(".").split("."))
        self._origin = dnslib.DNSLabel(mesh_domain.lower().strip("."))
        self._records: MeshRecords | None = None
        self._namespaces: frozenset[str] = frozenset()
        self._cache: dict[bytes, bytes] = {}
        self._hits = 0
        self._misses = 0

    @property
    def records(self) -> MeshRecords | None:
        """The records in use (None before the first load)."""
        return self._records

    def replace_records(self, records: MeshRecords) -> None:
        """Use `records` from now on, and drop every cached answer."""
        self._records = records
        self._namespaces = frozenset(namespace for namespace, _ in records.addresses)
        self._cache.clear()

    def statistics(self) -> ResolverStatistics:
        """Return the current counters."""
        return ResolverStatistics(
            generation=None if self._records is None else self._records.generation,
            names=0 if self._records is None else len(self._records.addresses),
            cache_entries=len(self._cache),
            cache_hits=self._hits,
            cache_misses=self._misses,
        )

    def resolve(self, query: bytes, *, transport: Transport) -> Resolution:
        """Decide what to do with the packet `query` that arrived over `transport`."""
        # Invariant: the key holds every byte that shapes the answer except the ID (case, RD, EDNS,
        # transport), so a hit is always the right answer; any difference is a miss, never a mis-answer.
        key = transport.value + query[2:]
        cached = self._cache.get(key)
        if cached is not None:
            self._hits += 1
            return Answered(response=query[:2] + cached)
        self._misses += 1
        if len(query) < _HEADER.size:
            return Dropped(reason=f"packet of {len(query)} bytes is shorter than a DNS header")
        _, flags, *_ = _HEADER.unpack_from(query)
        if flags & _FLAG_QR:
            return Dropped(reason="packet is a response, not a query")
        if flags & _FLAG_OPCODE:
            opcode = (flags & _FLAG_OPCODE) >> 11
            return Answered(
                response=_header_only(query, rcode=_RCODE_NOTIMP),
                problem=f"opcode must be QUERY (got {opcode!r}): answered NOTIMP",
            )
        try:
            request = dnslib.DNSRecord.parse(query)
        except Exception as exc:  # dnslib raises DNSError, but also struct/Index/Unicode errors on garbage
            return Answered(
                response=_header_only(query, rcode=_RCODE_FORMERR),
                problem=f"query of {len(query)} bytes does not parse ({exc}): answered FORMERR",
            )
        options = [record for record in request.ar if record.rtype == _TYPE_OPT]
        if len(request.questions) != 1 or len(options) > 1:
            return Answered(
                response=_header_only(query, rcode=_RCODE_FORMERR),
                problem=f"query must have 1 question and at most 1 OPT (got {len(request.questions)!r}"
                f" and {len(options)!r}): answered FORMERR",
            )
        question = request.q
        labels = tuple(label.decode("ascii", "replace").lower() for label in question.qname.label)
        if labels[-len(self._domain) :] != self._domain:
            return Forward(query=query)
        reply = request.reply(ra=1, aa=1)
        if options and (options[0].ttl >> 16) & 0xFF != 0:
            # RFC 6891 6.1.3: an EDNS version we do not speak gets BADVERS (extended rcode 16 = 1 << 4).
            reply.add_ar(dnslib.EDNS0(udp_len=EDNS_PAYLOAD_SIZE, ext_rcode=_BADVERS >> 4))
            return Answered(response=bytes(reply.pack()))
        self._fill(reply, labels=labels[: -len(self._domain)], qtype=question.qtype, qclass=question.qclass)
        if options:
            reply.add_ar(dnslib.EDNS0(udp_len=EDNS_PAYLOAD_SIZE))
        response = bytes(reply.pack())
        if transport is Transport.UDP and len(response) > udp_limit(request):
            response = _truncated(request)
        elif self._records is not None:
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache.clear()
            self._cache[key] = response[2:]
        return Answered(response=response)

    def fit_reply(self, query: bytes, reply: bytes, *, transport: Transport) -> bytes:
        """Return the upstream `reply` to `query` as it may go to the client (truncated to fit over UDP)."""
        if transport is Transport.TCP:
            return reply
        request = dnslib.DNSRecord.parse(query)
        if len(reply) <= udp_limit(request):
            return reply
        return _truncated(request, rcode=_HEADER.unpack_from(reply)[1] & 0xF)

    def servfail(self, query: bytes) -> bytes:
        """Return a SERVFAIL answer to `query` (every upstream failed or timed out)."""
        request = dnslib.DNSRecord.parse(query)
        reply = request.reply(ra=1, aa=0)
        reply.header.rcode = dnslib.RCODE.SERVFAIL
        if any(record.rtype == _TYPE_OPT for record in request.ar):
            reply.add_ar(dnslib.EDNS0(udp_len=EDNS_PAYLOAD_SIZE))
        return bytes(reply.pack())

    def _fill(self, reply: dnslib.DNSRecord, *, labels: tuple[str, ...], qtype: int, qclass: int) -> None:
        """Put the mesh answer for the name `labels` (relative to the mesh domain) into `reply`."""
        if self._records is None:
            reply.header.aa = 0
            reply.header.rcode = dnslib.RCODE.SERVFAIL
            return
        if qclass not in (_CLASS_IN, _CLASS_ANY):
            reply.header.aa = 0
            reply.header.rcode = dnslib.RCODE.REFUSED
            return
        address = None
        if len(labels) == 2:
            service, namespace = labels
            address = self._records.addresses.get((namespace, service))
        if address is not None:
            if qtype in (dnslib.QTYPE.A, dnslib.QTYPE.ANY):
                reply.add_answer(
                    dnslib.RR(reply.q.qname, dnslib.QTYPE.A, rdata=dnslib.A(str(address)), ttl=RECORD_TTL)
                )
                return
        elif not (labels == () or (len(labels) == 1 and labels[0] in self._namespaces)):
            # The apex and a namespace with services exist (RFC 8020: empty non-terminals are NODATA).
            reply.header.rcode = dnslib.RCODE.NXDOMAIN
        reply.add_auth(self._soa())

    def _soa(self) -> dnslib.RR:
        assert self._records is not None, "SOA asked for before records were loaded: this is a bug"
        soa = dnslib.SOA(
            mname=self._origin.add("ns"),
            rname=self._origin.add("hostmaster"),
            times=(self._records.generation % 2**32, 3600, 600, 86400, NEGATIVE_TTL),
        )
        return dnslib.RR(self._origin, dnslib.QTYPE.SOA, rdata=soa, ttl=NEGATIVE_TTL)


def udp_limit(request: dnslib.DNSRecord) -> int:
    """The largest UDP answer the client of `request` accepts (RFC 6891 6.2.5)."""
    for record in request.ar:
        if record.rtype == _TYPE_OPT:
            return max(MIN_UDP_PAYLOAD, int(record.rclass))
    return MIN_UDP_PAYLOAD


def _truncated(request: dnslib.DNSRecord, *, rcode: int = 0) -> bytes:
    """An empty answer to `request` with TC set, so the client retries over TCP (RFC 7766 5)."""
    reply = request.reply(ra=1, aa=0)
    reply.header.tc = 1
    reply.header.rcode = rcode
    if any(record.rtype == _TYPE_OPT for record in request.ar):
        reply.add_ar(dnslib.EDNS0(udp_len=EDNS_PAYLOAD_SIZE))
    return bytes(reply.pack())


def _header_only(query: bytes, *, rcode: int) -> bytes:
    """A bare header answering `query` with `rcode`: for packets whose body we cannot (or will not) parse."""
    ident, flags, *_ = _HEADER.unpack_from(query)
    response_flags = _FLAG_QR | (flags & (_FLAG_OPCODE | _FLAG_RD)) | rcode
    return _HEADER.pack(ident, response_flags, 0, 0, 0, 0)
