"""`QueryBatch` on real loopback sockets, and the batched server against the per-datagram one: same bytes."""

from __future__ import annotations

import functools
import socket
from collections.abc import Iterator
from pathlib import Path

import dns.message
import pytest
import trio

from aether.dns import HostPort, QueryBatch, RunningMeshDns, serve_mesh_dns
from aether.dns.datagrams import BATCH_SIZE

from .conftest import MESH_DOMAIN, write_records

CLIENTS = 4
RECEIVE_TIMEOUT = 5.0


def _batches_available() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        return QueryBatch.open(probe) is not None


pytestmark = pytest.mark.skipif(not _batches_available(), reason="recvmmsg/sendmmsg are Linux calls")


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, list[socket.socket]]]:
    """A non-blocking loopback UDP server socket and `CLIENTS` client sockets."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.setblocking(False)
    clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(CLIENTS)]
    for client in clients:
        client.bind(("127.0.0.1", 0))
        client.settimeout(RECEIVE_TIMEOUT)
    yield server, clients
    for each in [server, *clients]:
        each.close()


def test_one_receive_takes_every_sender_and_each_answer_reaches_its_own_sender_with_its_own_id(
    sockets: tuple[socket.socket, list[socket.socket]],
) -> None:
    """Datagrams of four senders, runts among them, come in one `receive`; the cached ones are answered in place,
    one by `reply`, the runts by nothing, and one `send` gets each answer to the socket that asked, with its ID."""
    server, clients = sockets
    batch = QueryBatch.open(server)
    assert batch is not None
    sent: list[tuple[int, bytes]] = []  # (client, datagram), in sending order
    for number in range(12):
        for index, client in enumerate(clients):
            ident = (index * 256 + number).to_bytes(2, "big")
            body = b"" if number == 5 and index == 0 else b"question %d" % (number % 4)
            datagram = b"\x07" if number == 6 and index == 1 else ident + body
            client.sendto(datagram, server.getsockname())
            sent.append((index, datagram))
    cache = {b"u" + b"question %d" % known: (b"answer %d" % known, 100.0) for known in (0, 1)}
    cache[b"u" + b"question 2"] = (b"stale", 10.0)

    assert batch.receive() == len(sent) <= BATCH_SIZE
    assert [batch.query(index) for index in range(len(sent))] == [datagram for _, datagram in sent]
    assert [batch.sender(index) for index in range(len(sent))] == [
        clients[index].getsockname() for index, _ in sent
    ]
    unanswered = batch.answer_cached(cache.get, now=50.0)
    assert [sent[index][1][2:] for index in unanswered] == [
        datagram[2:] for _, datagram in sent if datagram[2:] not in (b"question 0", b"question 1")
    ]
    replied = [index for index in unanswered if sent[index][1].endswith(b"question 3")]
    for index in replied:
        batch.reply(index, sent[index][1][:2] + b"a long answer" * 100)
    assert batch.send() == 0
    expected: dict[int, set[bytes]] = {index: set() for index in range(CLIENTS)}
    for position, (index, datagram) in enumerate(sent):
        if datagram[2:] in (b"question 0", b"question 1"):
            expected[index].add(datagram[:2] + b"answer " + datagram[-1:])
        elif position in replied:
            expected[index].add(datagram[:2] + b"a long answer" * 100)
    for index, client in enumerate(clients):
        received = {client.recv(4096) for _ in expected[index]}
        assert received == expected[index]
        client.setblocking(False)
        with pytest.raises(BlockingIOError):
            client.recv(4096)  # nothing more: the other slots were not answered


def test_receive_with_nothing_waiting_takes_nothing(
    sockets: tuple[socket.socket, list[socket.socket]],
) -> None:
    """No datagram waiting: `receive` returns 0 at once, and `send` sends nothing."""
    server, _ = sockets
    batch = QueryBatch.open(server)
    assert batch is not None
    cache: dict[bytes, tuple[bytes, float]] = {}
    assert batch.receive() == 0
    assert batch.answer_cached(cache.get, now=0.0) == []
    assert batch.send() == 0


def _queries() -> list[bytes]:
    """Queries of every kind the UDP loop meets, each a distinct cache key, malformed ones among them."""
    queries = [
        dns.message.make_query(name, rdtype, **make).to_wire()  # type: ignore[arg-type]
        for name, rdtype, make in [
            ("reviews.default.aether.internal", "A", {}),
            ("ReViEws.default.aether.internal", "A", {}),
            ("reviews.default.aether.internal", "A", {"use_edns": 0, "payload": 4096}),
            ("reviews.default.aether.internal", "AAAA", {}),
            ("ratings.default.aether.internal", "A", {"use_edns": 0, "want_dnssec": True}),
            ("nope.default.aether.internal", "A", {}),
            ("default.aether.internal", "A", {}),
            ("www.example.", "A", {}),
            ("WWW.example.", "A", {"use_edns": 0}),
            ("other.example.", "MX", {}),
            ("big.example.", "A", {}),
            ("reviews.default.aether.internal", "A", {"use_edns": 1}),
        ]
    ]
    return [
        *queries,
        b"\x01\x02\x03",  # shorter than a header: dropped
        b"\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff\xff",  # garbage question: FORMERR
        b"\x00\x00\x81\x80\x00\x00\x00\x00\x00\x00\x00\x00",  # a response: dropped
        b"\x00\x00\x28\x00\x00\x00\x00\x00\x00\x00\x00\x00",  # opcode UPDATE: NOTIMP
        b"",  # empty: dropped
    ]


async def _exchange(server: RunningMeshDns, *, round_number: int) -> dict[tuple[int, int], bytes]:
    """Send every query of `_queries` from `CLIENTS` sockets, all before the server runs again; return the
    answers by (client, ID), each checked to have reached the client that sent its ID."""
    senders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(CLIENTS)]
    for sender in senders:
        sender.bind(("127.0.0.1", 0))
    clients = [trio.socket.from_stdlib_socket(sender) for sender in senders]
    expected: dict[int, set[int]] = {index: set() for index in range(CLIENTS)}
    answers: dict[tuple[int, int], bytes] = {}
    for number, query in enumerate(_queries()):
        index = number % CLIENTS
        ident = round_number * 1000 + number
        datagram = ident.to_bytes(2, "big") + query[2:] if len(query) >= 2 else query
        # The stdlib socket under trio's: a send with no await, so every datagram is queued before the server
        # task runs (one batch of the UDP loop).
        senders[index].sendto(datagram, ("127.0.0.1", server.address.port))
        if len(query) >= 12:  # the runt and the empty datagram get no answer
            expected[index].add(ident)
    expected[14 % CLIENTS].discard(round_number * 1000 + 14)  # nor does the response
    for index, client in enumerate(clients):
        with client, trio.fail_after(RECEIVE_TIMEOUT):
            while {ident for sender, ident in answers if sender == index} != expected[index]:
                answer = await client.recv(65535)
                ident = int.from_bytes(answer[:2], "big")
                assert ident in expected[index], f"client {index} got an answer to ID {ident}"
                answers[index, ident] = answer
    return answers


@pytest.fixture
async def servers(nursery: trio.Nursery, tmp_path: Path, upstream: HostPort) -> list[RunningMeshDns]:
    """Two servers on the same records and upstream: batched (`recvmmsg`/`sendmmsg`), and one datagram a call.

    Their clock stands still, so a forwarded answer's TTLs are the same whichever server serves it, and when."""
    records_path = tmp_path / "mesh-dns.json"
    write_records(
        records_path, {"default/reviews": "10.96.0.10", "default/ratings": "10.96.0.11"}, generation=1
    )
    started = []
    for batch_syscalls in (True, False):
        running: RunningMeshDns = await nursery.start(
            functools.partial(
                serve_mesh_dns,
                listen=HostPort(host="127.0.0.1", port=0),
                records_path=records_path,
                upstreams=(upstream,),
                mesh_domain=MESH_DOMAIN,
                clock=lambda: 1000.0,
                batch_syscalls=batch_syscalls,
            )
        )
        await running.wait_generation(1)
        started.append(running)
    return started


async def test_batched_and_per_datagram_loops_answer_the_same_bytes(
    servers: list[RunningMeshDns], caplog: pytest.LogCaptureFixture
) -> None:
    """The same queries from four clients, malformed ones mixed in, get byte-identical answers from both loops:
    first as misses (resolved, forwarded), then again as cache hits, each round taken in one batch."""
    rounds = []
    for server in servers:
        before = server.statistics()
        first = await _exchange(server, round_number=1)
        middle = server.statistics()
        second = await _exchange(server, round_number=2)
        after = server.statistics()
        assert after.udp_batches - middle.udp_batches == 1  # all of round 2 in one batch
        # The seven mesh questions; forwarded ones were answered by their flights in round 1, so in round 2
        # they come from the forwarded-answer cache, and BADVERS, FORMERR and NOTIMP are never cached.
        assert after.resolver.cache_hits - middle.resolver.cache_hits == 7
        assert after.malformed - before.malformed == 2 * 5
        rounds.append((first, second))
    assert rounds[0] == rounds[1]
    assert any("shorter than a DNS header" in record.getMessage() for record in caplog.records)
    assert any("answered FORMERR" in record.getMessage() for record in caplog.records)


def test_an_ipv6_socket_gives_each_sender_as_recvfrom_does_and_answers_it() -> None:
    """On an AF_INET6 socket a slot's sender is the 4-tuple `recvfrom` gives, and its answer goes back there."""
    try:
        server = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        server.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    with server, socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as client:
        server.setblocking(False)
        client.bind(("::1", 0))
        client.settimeout(RECEIVE_TIMEOUT)
        batch = QueryBatch.open(server)
        assert batch is not None
        client.sendto(b"\x12\x34question", server.getsockname())
        assert batch.receive() == 1
        assert batch.sender(0) == client.getsockname()
        assert batch.answer_cached({b"uquestion": (b"answer", 1.0)}.get, now=0.0) == []
        assert batch.send() == 0
        assert client.recv(64) == b"\x12\x34answer"
