"""The peer of `bench_xds_change.py`'s floors: ACKs every push at once, in a process of its own, as Envoy is.

``python _xds_ack_peer.py SOCKET`` opens a Delta ADS stream through `aether.rpc.calls.open_grpc_socket` (purerpc),
which, as Envoy does, sends each ACK as one DATA frame and opens large flow-control windows, so the server reads
what it reads from Envoy: the ACK's one frame, and a window update now and then. It exits when the stream ends.

``python _xds_ack_peer.py SOCKET --raw`` speaks no protocol: it answers each read with as many bytes as an ACK's
DATA frame holds, until the server closes the connection.
"""

from __future__ import annotations

import socket as sockets
import sys
from pathlib import Path

import trio
from envoy.service.discovery.v3 import discovery_pb2

from aether.core.snapshot import ENDPOINT_TYPE
from aether.rpc.calls import open_grpc_socket
from aether.rpc.listen import ListenAddress
from aether.xds.server import SERVICE_NAME


async def ack_every_response(socket: Path) -> None:
    """Subscribe to load assignments, then answer each response with its ACK until the stream ends."""
    target = ListenAddress.unix(socket)
    async with open_grpc_socket(target) as grpc_socket:
        stream = await grpc_socket.start_request(
            "http",
            SERVICE_NAME,
            "DeltaAggregatedResources",
            discovery_pb2.DeltaDiscoveryRequest.DESCRIPTOR.full_name,
            str(target),
        )
        stream.expect_message_type(discovery_pb2.DeltaDiscoveryResponse)
        subscribe = discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT_TYPE)
        subscribe.node.id = "bench-transport"
        await stream.send_message(subscribe)
        while (response := await stream.receive_message()) is not None:
            ack = discovery_pb2.DeltaDiscoveryRequest(
                type_url=response.type_url, response_nonce=response.nonce
            )
            await stream.send_message(ack)


def answer_every_read(socket: Path) -> None:
    """Answer each read on the Unix socket `socket` with an ACK's bytes until the server closes the connection."""
    ack = discovery_pb2.DeltaDiscoveryRequest(type_url=ENDPOINT_TYPE, response_nonce="ca")
    # An HTTP/2 frame header (9 bytes) and a gRPC message prefix (5) before the message.
    reply = bytes(9 + 5 + ack.ByteSize())
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as connection:
        connection.connect(str(socket))
        while connection.recv(65_536):
            connection.sendall(reply)


if __name__ == "__main__":
    if sys.argv[2:] == ["--raw"]:
        answer_every_read(Path(sys.argv[1]))
    else:
        trio.run(ack_every_response, Path(sys.argv[1]))
