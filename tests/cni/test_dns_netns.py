"""A captured pod's DNS goes to the node's mesh-dns (DNAT of port 53), which answers from the agent's record file."""

from __future__ import annotations

import functools
import socket
import struct
import sys

import dnslib
import trio

from aether.testing.builders import kube_service_upserted, make_kube_service
from tests.cni.conftest import (
    NODE_IP,
    Agent,
    NetnsPair,
    environment,
    managed,
    needs_netns,
    network_config,
    run_cni,
    socket_in,
)

pytestmark = needs_netns

UPSTREAM_PORT = 5301
UPSTREAM_ANSWER = "192.0.2.1"


async def _serve_upstream(sock: trio.socket.SocketType) -> None:
    """A test upstream resolver: every A question gets `UPSTREAM_ANSWER`."""
    while True:
        packet, client = await sock.recvfrom(4096)
        request = dnslib.DNSRecord.parse(packet)
        reply = request.reply()
        reply.add_answer(dnslib.RR(request.q.qname, dnslib.QTYPE.A, rdata=dnslib.A(UPSTREAM_ANSWER), ttl=60))
        await sock.sendto(bytes(reply.pack()), client)


async def _ask_udp(pair: NetnsPair, name: str) -> dnslib.DNSRecord:
    """Ask the pod's resolver (a ClusterIP-like 10.96.0.10) over UDP from inside the pod; retry until answered."""
    query = bytes(dnslib.DNSRecord.question(name, "A").pack())
    with socket_in(pair.pod_path, kind=socket.SOCK_DGRAM) as sock:
        await sock.connect(("10.96.0.10", 53))
        while True:
            await sock.send(query)
            with trio.move_on_after(0.3):
                try:
                    return dnslib.DNSRecord.parse(await sock.recv(4096))
                except (
                    ConnectionRefusedError
                ):  # mesh-dns is still starting: its port answered ICMP unreachable
                    await trio.sleep(0.05)


async def _ask_tcp(pair: NetnsPair, name: str) -> dnslib.DNSRecord:
    query = bytes(dnslib.DNSRecord.question(name, "A").pack())
    with socket_in(pair.pod_path) as sock:
        await sock.connect(("10.96.0.10", 53))
        await sock.send(struct.pack("!H", len(query)) + query)
        buffer = b""
        while len(buffer) < 2 or len(buffer) < 2 + struct.unpack("!H", buffer[:2])[0]:
            chunk = await sock.recv(4096)
            assert chunk, "mesh-dns closed the TCP connection without an answer"
            buffer += chunk
        return dnslib.DNSRecord.parse(buffer[2:])


def _addresses(reply: dnslib.DNSRecord) -> list[str]:
    return [str(record.rdata) for record in reply.rr]


async def test_pod_dns_is_answered_by_mesh_dns_from_the_agents_records(
    agent: Agent, netns_pair: NetnsPair
) -> None:
    """Mesh names resolve to what the agent's state knows; other names come from the upstream (UDP and TCP)."""
    managed(agent)
    run = await run_cni(
        environment("ADD", netns=netns_pair.pod_path), network_config(agent.socket, meshDNS=NODE_IP)
    )
    assert run.status == 0
    async with agent.running.journal.sender() as send:
        await send.send(kube_service_upserted(make_kube_service("reviews", cluster_ip="10.96.55.5")))
    upstream = socket_in(netns_pair.node_path, kind=socket.SOCK_DGRAM)
    await upstream.bind((NODE_IP, UPSTREAM_PORT))
    command = [
        *("ip", "netns", "exec", netns_pair.node, sys.executable, "-m", "aether.cli", "mesh-dns"),
        *("--records", str(agent.records), "--listen", f"{NODE_IP}:18054"),
        *("--upstream", f"{NODE_IP}:{UPSTREAM_PORT}"),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_upstream, upstream)
        # Cancelling the nursery terminates mesh-dns (trio.run_process kills its child when cancelled).
        await nursery.start(functools.partial(trio.run_process, command, check=False))
        with trio.fail_after(15):
            reply = await _ask_udp(netns_pair, "reviews.default.aether.internal")
            while not reply.rr:  # the agent's first record file may predate the Service: wait for the next
                reply = await _ask_udp(netns_pair, "reviews.default.aether.internal")
            assert _addresses(reply) == ["10.96.55.5"]
            assert _addresses(await _ask_udp(netns_pair, "example.org")) == [UPSTREAM_ANSWER]
            assert _addresses(await _ask_tcp(netns_pair, "reviews.default.aether.internal")) == ["10.96.55.5"]
            nxdomain = await _ask_udp(netns_pair, "nothing.default.aether.internal")
            assert dnslib.RCODE[nxdomain.header.rcode] == "NXDOMAIN"
        nursery.cancel_scope.cancel()
    upstream.close()
