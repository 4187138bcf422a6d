"""The forwarded-answer cache: what may be kept and for how long, count-down by age, expiry, eviction."""

from __future__ import annotations

import dnslib
import pytest

from aether.dns import AnswerCache, AnswerCacheStatistics, Reply, read_reply
from aether.dns.cache import MAX_NEGATIVE_TTL, MAX_TTL, lifetime


def reply(
    *, rcode: int = 0, ttls: tuple[int, ...] = (), soa: tuple[int, int] | None = None, tc: bool = False
) -> Reply:
    message = dnslib.DNSRecord.question("www.example").reply()
    message.header.rcode = rcode
    message.header.tc = int(tc)
    for index, ttl in enumerate(ttls):
        message.add_answer(dnslib.RR("www.example", rdata=dnslib.A(f"192.0.2.{index + 1}"), ttl=ttl))
    if soa is not None:
        record = dnslib.SOA("ns.example.", "hostmaster.example.", (1, 3600, 600, 86400, soa[1]))
        message.add_auth(dnslib.RR("example.", dnslib.QTYPE.SOA, rdata=record, ttl=soa[0]))
    return read_reply(bytes(message.pack()))


@pytest.mark.parametrize(
    ("shape", "seconds"),
    [
        (reply(ttls=(60, 30)), 30),
        (reply(ttls=(10**6,)), MAX_TTL),
        (reply(ttls=(0,)), None),
        (reply(ttls=(60,), tc=True), None),
        (reply(rcode=3, soa=(300, 20)), 20),
        (reply(rcode=3, soa=(15, 20)), 15),
        (reply(rcode=0, soa=(86400, 86400)), MAX_NEGATIVE_TTL),
        (reply(rcode=3), None),
        (reply(rcode=0), None),
        (reply(rcode=2, soa=(300, 20)), None),
    ],
)
def test_lifetime(shape: Reply, seconds: int | None) -> None:
    """Positive: the smallest TTL; negative: RFC 2308 SOA rule; TC, SERVFAIL, no SOA, TTL 0: never kept."""
    assert lifetime(shape) == seconds


def test_entries_count_down_expire_and_the_oldest_is_evicted() -> None:
    """A hit's TTLs drop by whole seconds of age; at the lifetime it is gone; a full cache drops its oldest."""
    cache = AnswerCache(max_entries=2)
    assert cache.put(b"a", reply(ttls=(30,)), now=100.0)
    hit = cache.get(b"a", now=112.5)
    assert hit is not None
    assert ([rr.ttl for rr in dnslib.DNSRecord.parse(hit[0]).rr], hit[1]) == ([18], 113.0)
    assert cache.get(b"a", now=130.0) is None
    assert not cache.put(b"tc", reply(ttls=(30,), tc=True), now=130.0)
    for key in (b"1", b"2", b"3"):
        cache.put(key, reply(ttls=(30,)), now=130.0)
    assert [cache.get(key, now=130.0) is not None for key in (b"1", b"2", b"3")] == [False, True, True]
    assert cache.statistics() == AnswerCacheStatistics(entries=2, hits=3, misses=2, stored=4)
