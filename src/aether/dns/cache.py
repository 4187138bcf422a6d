"""The cache of forwarded answers: upstream replies kept for their TTL (RFC 2308 negative TTLs included) and
counted down as they age, keyed on `Question.cache_key` (pure: the clock comes in as `now`)."""

from __future__ import annotations

import struct

import attrs

from aether.dns.wire import RCODE_NOERROR, RCODE_NXDOMAIN, Reply

MAX_TTL = 3600
"""Longest we keep a positive answer, whatever its TTL: an hour bounds how long a changed external record can stay
stale here (unbound's cache-max-ttl is a day; a mesh node restarts pods faster than that)."""
MAX_NEGATIVE_TTL = 300
"""Longest we keep NXDOMAIN/NODATA: RFC 2308 5 suggests one to three hours, but a name created a minute ago should
resolve within minutes (unbound's cache-max-negative-ttl is an hour)."""
MAX_ENTRIES = 10_000
"""Answers kept at once: a node's pods ask for hundreds to a few thousand distinct names; at a few hundred bytes
per answer this is a few MB. When full, the oldest stored answer goes first."""
_TTL = struct.Struct("!I")


def lifetime(reply: Reply) -> int | None:
    """Seconds `reply` may be served from the cache, or None when it must not be kept.

    Kept: NOERROR with answers (the smallest TTL of any record, at most `MAX_TTL`), and NXDOMAIN or NODATA with
    an SOA in the authority section (RFC 2308 5: the smaller of the SOA's TTL and MINIMUM, at most
    `MAX_NEGATIVE_TTL`). Not kept: truncated replies (TC: the rest is missing), other rcodes, negative answers
    without an SOA (RFC 2308 5 says they SHOULD NOT be cached), and anything with a zero TTL (RFC 1035 3.2.1).
    """
    if reply.truncated:
        return None
    ttls = [ttl for _, ttl in reply.ttls]
    if reply.rcode == RCODE_NOERROR and reply.answers:
        seconds = min([*ttls, MAX_TTL])
    elif reply.rcode in (RCODE_NOERROR, RCODE_NXDOMAIN) and reply.negative_ttl is not None:
        seconds = min([*ttls, reply.negative_ttl, MAX_NEGATIVE_TTL])
    else:
        return None
    return seconds if seconds > 0 else None


@attrs.frozen(kw_only=True)
class AnswerCacheStatistics:
    """Counters of one `AnswerCache`."""

    entries: int
    hits: int
    misses: int
    stored: int
    """Replies stored (replies `lifetime` refused are not counted)."""


@attrs.frozen(kw_only=True)
class _Entry:
    reply: Reply
    stored_at: float
    expires_at: float


class AnswerCache:
    """Upstream replies by cache key, each served until its lifetime is over, its TTLs counted down by its age."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._entries: dict[bytes, _Entry] = {}
        self._hits = 0
        self._misses = 0
        self._stored = 0

    def get(self, key: bytes, *, now: float) -> tuple[bytes, float] | None:
        """The cached reply for `key` as of `now` (TTLs less its whole seconds of age), and until when those
        bytes stay right (the next whole second of age, or expiry); None on a miss or an expired entry."""
        entry = self._entries.get(key)
        if entry is None or now >= entry.expires_at or now < entry.stored_at:
            if entry is not None:
                del self._entries[key]
            self._misses += 1
            return None
        self._hits += 1
        age = int(now - entry.stored_at)
        valid_until = min(entry.expires_at, entry.stored_at + age + 1)
        if age == 0:
            return entry.reply.message, valid_until
        message = bytearray(entry.reply.message)
        for offset, ttl in entry.reply.ttls:
            _TTL.pack_into(
                message, offset, ttl - age
            )  # > 0: every TTL is at least the lifetime, and age < it
        return bytes(message), valid_until

    def put(self, key: bytes, reply: Reply, *, now: float) -> bool:
        """Keep `reply` for `key` if `lifetime` allows; return whether it was kept."""
        seconds = lifetime(reply)
        if seconds is None:
            return False
        self._entries.pop(key, None)
        if len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]  # dicts keep insertion order: the oldest goes
        self._entries[key] = _Entry(reply=reply, stored_at=now, expires_at=now + seconds)
        self._stored += 1
        return True

    def statistics(self) -> AnswerCacheStatistics:
        """Return the current counters."""
        return AnswerCacheStatistics(
            entries=len(self._entries), hits=self._hits, misses=self._misses, stored=self._stored
        )
