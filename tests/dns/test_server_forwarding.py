"""Forwarding through `serve_mesh_dns` with real clients (dnspython, dig) and a loopback upstream the test answers
by hand: the TTL cache on a clock the test moves, negative caching, coalescing, junk, silence and truncation."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dnslib
import pytest
import trio
import trio.testing

from aether.dns import HostPort, RunningMeshDns, serve_mesh_dns
from tests.needs import needs

from .conftest import MESH_DOMAIN, write_records

CLIENT_TIMEOUT = 5.0
UPSTREAM_TIMEOUT = 0.5
Respond = Callable[[dnslib.DNSRecord], "dnslib.DNSRecord | bytes | None"]


@attrs.define
class ManualClock:
    """The clock mesh-dns ages its cache by; only the test moves it."""

    now: float = 1_000.0


class HandUpstream:
    """A loopback UDP upstream that hands each query to the test, which answers it (or not)."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.address = HostPort(host="127.0.0.1", port=sock.getsockname()[1])

    async def receive(self) -> tuple[bytes, tuple[str, int]]:
        with trio.fail_after(CLIENT_TIMEOUT):
            packet, peer = await self.sock.recvfrom(65535)
        return packet, peer

    async def answer(self, packet: bytes, peer: tuple[str, int], respond: Respond) -> None:
        reply = respond(dnslib.DNSRecord.parse(packet))
        if reply is not None:
            await self.sock.sendto(reply if isinstance(reply, bytes) else bytes(reply.pack()), peer)

    def assert_silent(self) -> None:
        """No query reached the upstream (mesh-dns sends upstream before it answers, so this is conclusive)."""
        with pytest.raises(BlockingIOError):
            self.sock._sock.recv(65535)  # type: ignore[attr-defined]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def hand_upstream() -> AsyncIterator[HandUpstream]:
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        await sock.bind(("127.0.0.1", 0))
        yield HandUpstream(sock)


@pytest.fixture
async def server(
    nursery: trio.Nursery, records_path: Path, hand_upstream: HandUpstream, clock: ManualClock
) -> RunningMeshDns:
    write_records(records_path, {"default/reviews": "10.96.0.10"}, generation=1)
    running: RunningMeshDns = await nursery.start(
        lambda task_status: serve_mesh_dns(
            listen=HostPort(host="127.0.0.1", port=0),
            records_path=records_path,
            upstreams=(hand_upstream.address,),
            mesh_domain=MESH_DOMAIN,
            upstream_timeout=UPSTREAM_TIMEOUT,
            poll_interval=0.05,
            clock=lambda: clock.now,
            task_status=task_status,
        )
    )
    return running


def a_record(address: str, *, ttl: int) -> Respond:
    def respond(request: dnslib.DNSRecord) -> dnslib.DNSRecord:
        reply = request.reply()
        reply.add_answer(dnslib.RR(request.q.qname, dnslib.QTYPE.A, rdata=dnslib.A(address), ttl=ttl))
        return reply

    return respond


def negative(*, rcode: int, soa_ttl: int | None, minimum: int = 0) -> Respond:
    def respond(request: dnslib.DNSRecord) -> dnslib.DNSRecord:
        reply = request.reply()
        reply.header.rcode = rcode
        if soa_ttl is not None:
            soa = dnslib.SOA("ns.example.", "hostmaster.example.", (1, 3600, 600, 86400, minimum))
            reply.add_auth(dnslib.RR("example.", dnslib.QTYPE.SOA, rdata=soa, ttl=soa_ttl))
        return reply

    return respond


async def udp(server: RunningMeshDns, query: dns.message.Message) -> dns.message.Message:
    return await trio.to_thread.run_sync(
        lambda: dns.query.udp(query, "127.0.0.1", port=server.address.port, timeout=CLIENT_TIMEOUT)
    )


async def ask(
    server: RunningMeshDns,
    upstream: HandUpstream,
    query: dns.message.Message,
    respond: Respond | None = None,
) -> dns.message.Message:
    """Send `query` over UDP; with `respond`, the upstream must get one query and answers it that way."""
    answers: list[dns.message.Message] = []

    async def client() -> None:
        answers.append(await udp(server, query))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client)
        if respond is not None:
            await upstream.answer(*await upstream.receive(), respond)
    if respond is None:
        upstream.assert_silent()
    return answers[0]


def a_query(name: str, rdtype: str = "A", **make: object) -> dns.message.Message:
    return dns.message.make_query(name, rdtype, **make)  # type: ignore[arg-type]


def records(message: dns.message.Message) -> list[tuple[str, int]]:
    return [(item.to_text(), rrset.ttl) for rrset in message.answer for item in rrset]


async def test_forwarded_answer_is_cached_for_its_ttl_counted_down_by_the_clock(
    server: RunningMeshDns, hand_upstream: HandUpstream, clock: ManualClock
) -> None:
    """A 30 s answer is served from the cache with its TTL counting down, then asked upstream again at 30 s."""
    first = await ask(server, hand_upstream, a_query("www.example."), a_record("192.0.2.1", ttl=30))
    assert records(first) == [("192.0.2.1", 30)]
    clock.now += 10.7
    assert records(await ask(server, hand_upstream, a_query("www.example."))) == [("192.0.2.1", 20)]
    clock.now += 19.3
    fresh = await ask(server, hand_upstream, a_query("www.example."), a_record("192.0.2.2", ttl=30))
    assert records(fresh) == [("192.0.2.2", 30)]
    assert (server.statistics().forwarded, server.statistics().resolver.forward_cache_hits) == (2, 1)


@needs("dig")
async def test_dig_gets_a_cached_answer_with_its_own_id_and_spelling(
    server: RunningMeshDns, hand_upstream: HandUpstream, clock: ManualClock
) -> None:
    """dig's query (EDNS, cookie, AD) is answered from the cache filled by another client's; dig sees its spelling."""
    first = a_query("api.example.", use_edns=0, flags=dns.flags.RD | dns.flags.AD)
    await ask(server, hand_upstream, first, a_record("192.0.2.9", ttl=60))
    clock.now += 5
    result = await trio.run_process(
        ["dig", "@127.0.0.1", "-p", str(server.address.port), "+time=3", "+tries=1", "API.Example.", "A"],
        capture_stdout=True,
    )
    hand_upstream.assert_silent()
    output = result.stdout.decode()
    assert "status: NOERROR" in output
    assert "API.Example.\t\t55\tIN\tA\t192.0.2.9" in output


async def test_nxdomain_and_nodata_are_cached_for_the_soa_minimum(
    server: RunningMeshDns, hand_upstream: HandUpstream, clock: ManualClock
) -> None:
    """RFC 2308: NXDOMAIN and NODATA live min(SOA TTL, SOA MINIMUM) seconds; without an SOA they are not kept."""
    gone = a_query("gone.example.")
    nxdomain = negative(rcode=dnslib.RCODE.NXDOMAIN, soa_ttl=3600, minimum=10)
    assert (await ask(server, hand_upstream, gone, nxdomain)).rcode() == dns.rcode.NXDOMAIN
    clock.now += 9.9
    assert (await ask(server, hand_upstream, gone)).rcode() == dns.rcode.NXDOMAIN
    clock.now += 0.1
    assert (await ask(server, hand_upstream, gone, nxdomain)).rcode() == dns.rcode.NXDOMAIN

    v4only = a_query("v4only.example.", "AAAA")
    nodata = negative(rcode=0, soa_ttl=20, minimum=60)
    assert records(await ask(server, hand_upstream, v4only, nodata)) == []
    clock.now += 19
    cached = await ask(server, hand_upstream, v4only)
    assert (cached.rcode(), cached.answer, [rrset.ttl for rrset in cached.authority]) == (0, [], [1])
    clock.now += 1
    assert records(await ask(server, hand_upstream, v4only, nodata)) == []

    bare = a_query("bare.example.")
    without_soa = negative(rcode=dnslib.RCODE.NXDOMAIN, soa_ttl=None)
    assert (await ask(server, hand_upstream, bare, without_soa)).rcode() == dns.rcode.NXDOMAIN
    assert (await ask(server, hand_upstream, bare, without_soa)).rcode() == dns.rcode.NXDOMAIN


async def test_identical_questions_in_flight_share_one_upstream_query(
    server: RunningMeshDns, hand_upstream: HandUpstream
) -> None:
    """Two clients ask the same question (other ID, other case) while it is upstream: one upstream query, two
    answers, each with its asker's ID and spelling."""
    clients = [trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    for index, (client, name) in enumerate(zip(clients, ["slow.example.", "SLOW.example."], strict=True)):
        await client.connect(("127.0.0.1", server.address.port))
        await client.send(a_query(name, id=100 + index).to_wire())
        if index == 0:
            packet, peer = await hand_upstream.receive()
    await trio.testing.wait_all_tasks_blocked()
    assert server.statistics().coalesced == 1
    await hand_upstream.answer(packet, peer, a_record("192.0.2.5", ttl=60))
    replies = []
    with trio.fail_after(CLIENT_TIMEOUT):
        for client in clients:
            replies.append(dns.message.from_wire(await client.recv(512)))
            client.close()
    assert [(reply.id, reply.question[0].name.to_text(), records(reply)) for reply in replies] == [
        (100, "slow.example.", [("192.0.2.5", 60)]),
        (101, "SLOW.example.", [("192.0.2.5", 60)]),
    ]
    hand_upstream.assert_silent()
    assert server.statistics().forwarded == 1


async def test_junk_from_upstream_gives_servfail_caches_nothing_and_serving_goes_on(
    server: RunningMeshDns, hand_upstream: HandUpstream
) -> None:
    """A reply with our ID but a garbled body is SERVFAIL at once and not kept; the next query goes upstream."""

    def junk(request: dnslib.DNSRecord) -> bytes:
        ident: int = request.header.id
        return ident.to_bytes(2, "big") + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\xff\xff"

    failed = await ask(server, hand_upstream, a_query("junk.example."), junk)
    assert failed.rcode() == dns.rcode.SERVFAIL
    good = await ask(server, hand_upstream, a_query("junk.example."), a_record("192.0.2.3", ttl=60))
    assert records(good) == [("192.0.2.3", 60)]
    assert records(await udp(server, a_query("reviews.default.aether.internal."))) == [("10.96.0.10", 5)]
    assert server.statistics().upstream_failures == 1


async def test_silent_upstream_gives_servfail_and_nothing_is_cached(
    server: RunningMeshDns, hand_upstream: HandUpstream
) -> None:
    """An upstream that never answers gives SERVFAIL after the timeout; the next query asks upstream again."""
    assert (await ask(server, hand_upstream, a_query("mute.example."), lambda request: None)).rcode() == (
        dns.rcode.SERVFAIL
    )
    good = await ask(server, hand_upstream, a_query("mute.example."), a_record("192.0.2.4", ttl=60))
    assert records(good) == [("192.0.2.4", 60)]


async def test_truncated_answers_are_not_cached(server: RunningMeshDns, hand_upstream: HandUpstream) -> None:
    """A TC answer reaches the client as TC, and the same question asked again goes upstream again."""

    def truncated(request: dnslib.DNSRecord) -> dnslib.DNSRecord:
        reply = request.reply()
        reply.header.tc = 1
        return reply

    for _ in range(2):
        reply = await ask(server, hand_upstream, a_query("big.example."), truncated)
        assert (reply.flags & dns.flags.TC, reply.answer) == (dns.flags.TC, [])


async def test_a_cached_answer_serves_only_the_question_it_answers(
    server: RunningMeshDns, hand_upstream: HandUpstream
) -> None:
    """Another type, DO, CD or RD is a miss that asks upstream; the client's EDNS options never go upstream."""
    await ask(server, hand_upstream, a_query("www.example."), a_record("192.0.2.1", ttl=60))
    await ask(server, hand_upstream, a_query("WWW.EXAMPLE."))
    misses = [
        a_query("www.example.", "AAAA"),
        a_query("www.example.", want_dnssec=True),
        a_query("www.example.", flags=dns.flags.RD | dns.flags.CD),
        a_query("www.example.", flags=0),
    ]
    for query in misses:
        await ask(server, hand_upstream, query, a_record("192.0.2.1", ttl=60))
    cookie = dns.edns.GenericOption(dns.edns.OptionType.COOKIE, b"01234567")
    seen: list[dnslib.DNSRecord] = []

    def record_and_answer(request: dnslib.DNSRecord) -> dnslib.DNSRecord:
        seen.append(request)
        return a_record("192.0.2.8", ttl=60)(request)

    with_cookie = a_query("Cookie.Example.", use_edns=0, payload=4096, options=[cookie])
    assert records(await ask(server, hand_upstream, with_cookie, record_and_answer)) == [("192.0.2.8", 60)]
    [request] = seen
    assert (str(request.q.qname), [(rr.rtype, rr.rclass, rr.rdata) for rr in request.ar]) == (
        "cookie.example.",
        [(41, 1232, [])],
    )
