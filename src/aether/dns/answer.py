"""The sans-IO resolver core: query bytes plus the mesh records and the time in, answer bytes (or "forward this") out.

Every answer is cached as bytes keyed on the transport and the query after its 2-byte ID, so a repeated query costs
one dict lookup: mesh answers until the records change, forwarded ones until their TTLs tick (once a second) or
expire. Forwarded replies themselves live in an `AnswerCache` keyed on the question's meaning, so a query that
differs only in ID or name case is answered without going upstream.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs
import dnslib

from aether.dns.cache import AnswerCache
from aether.dns.errors import WireFormatError
from aether.dns.records import MeshRecords
from aether.dns.wire import (
    EDNS_PAYLOAD_SIZE,
    HEADER,
    Question,
    Reply,
    empty_reply,
    in_zone,
    read_question,
    to_wire_name,
    upstream_query,
)

RECORD_TTL = 5
"""TTL of mesh A answers: short, because services move; clients re-ask often and the cache makes that cheap."""
NEGATIVE_TTL = 5
"""SOA minimum for NXDOMAIN/NODATA: the same as `RECORD_TTL`, so a new service is visible within seconds."""
CACHE_MAX_ENTRIES = 50_000
"""Bound on cached answer bytes: a node asks for a few thousand names times a few query shapes; when full, the
cache is cleared rather than evicted piecemeal (a miss is only a parse, plus a render for forwarded names)."""

_HEADER = HEADER
_NEVER = float("inf")
_FLAG_QR = 0x8000
_FLAG_OPCODE = 0x7800
_FLAG_RD = 0x0100
_FLAG_TC = 0x02  # in the third byte of the header
_RCODE_FORMERR = 1
_RCODE_SERVFAIL = 2
_RCODE_NOTIMP = 4
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
    """The name is outside the mesh domain and not cached: send `query` upstream, give the reply to `learn`, and
    answer each client that asked this `key` with `answer_from`."""

    key: bytes
    """`Question.cache_key`: clients asking the same key can share one upstream query and its answer."""
    query: bytes
    """The query to send upstream (ID 0: the forwarder picks one), as `aether.dns.wire.upstream_query` builds it."""
    question: Question
    """The client's question (its spelling, flags and UDP limit shape its answer)."""


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
    forward_cache_entries: int
    forward_cache_hits: int
    forward_cache_misses: int


class MeshResolver:
    """Answer DNS queries for `<service>.<namespace>.<mesh_domain>` from `MeshRecords`, and other names from the
    forwarded-answer cache.

    Every name under the mesh domain is answered authoritatively: A records for known services,
    NODATA for other types of a known name (or of a namespace that has services), NXDOMAIN otherwise,
    and SERVFAIL while no records have been loaded. Everything else is answered from the cache of upstream
    replies, or returned as `Forward`.
    """

    def __init__(self, *, mesh_domain: str) -> None:
        self._zone = to_wire_name(mesh_domain.lower())
        self._domain = tuple(mesh_domain.lower().strip(".").split("."))
        self._origin = dnslib.DNSLabel(mesh_domain.lower().strip("."))
        self._records: MeshRecords | None = None
        self._namespaces: frozenset[str] = frozenset()
        self._cache: dict[bytes, tuple[bytes, float]] = {}
        """Transport and query after its ID, to the answer after its ID and until when it is right."""
        self._forwarded = AnswerCache()
        self._hits = 0
        self._misses = 0

    @property
    def records(self) -> MeshRecords | None:
        """The records in use (None before the first load)."""
        return self._records

    def replace_records(self, records: MeshRecords) -> None:
        """Use `records` from now on, and drop every cached answer (forwarded replies stay in their cache)."""
        self._records = records
        self._namespaces = frozenset(namespace for namespace, _ in records.addresses)
        self._cache.clear()

    def statistics(self) -> ResolverStatistics:
        """Return the current counters."""
        forwarded = self._forwarded.statistics()
        return ResolverStatistics(
            generation=None if self._records is None else self._records.generation,
            names=0 if self._records is None else len(self._records.addresses),
            cache_entries=len(self._cache),
            cache_hits=self._hits,
            cache_misses=self._misses,
            forward_cache_entries=forwarded.entries,
            forward_cache_hits=forwarded.hits,
            forward_cache_misses=forwarded.misses,
        )

    def cached(self, query: bytes, *, transport: Transport, now: float) -> bytes | None:
        """The cached answer to `query` (with its ID), or None: the fast path, one dict lookup."""
        # Invariant: the key holds every byte that shapes the answer except the ID (case, RD, EDNS,
        # transport), so a hit is always the right answer; any difference is a miss, never a mis-answer.
        # `is` and a literal: Enum's `.value` is a Python-level descriptor, a tenth of this method's time.
        entry = self._cache.get((b"u" if transport is Transport.UDP else b"t") + query[2:])
        if entry is not None and now < entry[1]:
            self._hits += 1
            return query[:2] + entry[0]
        return None

    def udp_lookup(self) -> Callable[[bytes], tuple[bytes, float] | None]:
        """The answer cache's own `get`, for a loop that answers a batch of UDP queries without a call per query.

        The key is `Transport.UDP.value` + the query after its ID; the value is the answer after its ID and until
        when it is right (the caller compares it with now, and counts its hits with `count_hits`). It stays
        valid: the cache is one dict for the resolver's lifetime, cleared in place.
        """
        return self._cache.get

    def count_hits(self, count: int) -> None:
        """Count `count` answers served from `udp_lookup`'s cache."""
        self._hits += count

    def resolve(self, query: bytes, *, transport: Transport, now: float) -> Resolution:
        """Decide what to do with the packet `query` that arrived over `transport` at `now` (seconds, any epoch)."""
        cached = self.cached(query, transport=transport, now=now)
        if cached is not None:
            return Answered(response=cached)
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
            question = read_question(query)
        except WireFormatError as exc:
            return Answered(
                response=_header_only(query, rcode=_RCODE_FORMERR),
                problem=f"query of {len(query)} bytes: {exc}: answered FORMERR",
            )
        if question.edns_version != 0:
            # RFC 6891 6.1.3: an EDNS version we do not speak gets BADVERS (extended rcode 16 = 1 << 4), and we
            # speak only version 0 upstream too.
            return Answered(response=empty_reply(query, question, rcode=_BADVERS))
        key = transport.value + query[2:]
        if in_zone(question.name, self._zone):
            answered = self._mesh_answer(query, question, transport=transport)
            if answered.problem is None and self._records is not None and not answered.response[2] & _FLAG_TC:
                self._remember(key, answered.response, valid_until=_NEVER)
            return answered
        cache_key = question.cache_key()
        hit = self._forwarded.get(cache_key, now=now)
        if hit is None:
            return Forward(key=cache_key, query=upstream_query(question), question=question)
        message, valid_until = hit
        response = self.answer_from(query, question, message, transport=transport)
        self._remember(key, response, valid_until=valid_until)
        return Answered(response=response)

    def learn(self, forward: Forward, reply: Reply, *, now: float) -> None:
        """Keep the upstream's `reply` to `forward` for as long as its TTLs allow (see `cache.lifetime`)."""
        self._forwarded.put(forward.key, reply, now=now)

    def answer_from(self, query: bytes, question: Question, message: bytes, *, transport: Transport) -> bytes:
        """The upstream reply `message` (to the same cache key) as an answer to the client's `query`: the client's
        ID and name spelling, truncated (TC) when it does not fit the client's UDP size."""
        name_end = _HEADER.size + len(question.name)
        response = query[:2] + message[2 : _HEADER.size] + question.name + message[name_end:]
        if transport is Transport.UDP and len(response) > question.udp_limit:
            return empty_reply(query, question, rcode=message[3] & 0xF, truncated=True)
        return response

    def servfail(self, query: bytes, question: Question) -> bytes:
        """Return a SERVFAIL answer to `query` (every upstream failed or timed out)."""
        return empty_reply(query, question, rcode=_RCODE_SERVFAIL)

    def _remember(self, key: bytes, response: bytes, *, valid_until: float) -> None:
        if len(self._cache) >= CACHE_MAX_ENTRIES:
            self._cache.clear()
        self._cache[key] = (response[2:], valid_until)

    def _mesh_answer(self, query: bytes, question: Question, *, transport: Transport) -> Answered:
        try:
            request = dnslib.DNSRecord.parse(query)
        except Exception as exc:  # dnslib raises DNSError, but also struct/Index/Unicode errors on garbage
            # read_question only walks the records; dnslib also reads their data (an A of 3 bytes, say).
            return Answered(
                response=_header_only(query, rcode=_RCODE_FORMERR),
                problem=f"query of {len(query)} bytes does not parse ({exc}): answered FORMERR",
            )
        labels = tuple(label.decode("ascii", "replace").lower() for label in request.q.qname.label)
        reply = request.reply(ra=1, aa=1)
        self._fill(reply, labels=labels[: -len(self._domain)], qtype=question.qtype, qclass=question.qclass)
        if question.edns_payload is not None:
            reply.add_ar(dnslib.EDNS0(udp_len=EDNS_PAYLOAD_SIZE))
        response = bytes(reply.pack())
        if transport is Transport.UDP and len(response) > question.udp_limit:
            return Answered(response=empty_reply(query, question, rcode=0, truncated=True))
        return Answered(response=response)

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


def _header_only(query: bytes, *, rcode: int) -> bytes:
    """A bare header answering `query` with `rcode`: for packets whose body we cannot (or will not) parse."""
    ident, flags, *_ = _HEADER.unpack_from(query)
    response_flags = _FLAG_QR | (flags & (_FLAG_OPCODE | _FLAG_RD)) | rcode
    return _HEADER.pack(ident, response_flags, 0, 0, 0, 0)
