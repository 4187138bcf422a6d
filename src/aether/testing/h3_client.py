"""A one-request HTTP/3 client on trio: aioquic's sans-IO QUIC and HTTP/3 connections over a trio UDP socket.

Envoy's own QUIC client (a caller's `quic:` cluster) always presents its SVID; this client presents what a test
gives it (a certificate, another CA's, or none) and reports what the server did: the response, or how it closed
the connection (the QUIC error code and, for a TLS failure, the alert it carries).
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Mapping
from typing import Any

import attrs
import trio
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted
from aioquic.quic.packet import QuicErrorCode
from aioquic.tls import AlertDescription
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from aether.identity.mint import MintedSvid

__all__ = ["H3Close", "H3Outcome", "h3_request"]

_RECEIVE_SIZE = 65536


@attrs.frozen(kw_only=True)
class H3Close:
    """How a QUIC connection was closed (its CONNECTION_CLOSE frame, or the client's own idle timeout)."""

    error_code: int
    frame_type: int | None
    reason: str

    @property
    def alert(self) -> str | None:
        """The TLS alert a `CRYPTO_ERROR` carries (`0x100 + alert`, RFC 9001 section 4.8), by name, or None."""
        alert = self.error_code - QuicErrorCode.CRYPTO_ERROR
        if not 0 <= alert <= 0xFF:
            return None
        try:
            return AlertDescription(alert).name
        except ValueError:
            return f"alert {alert}"


@attrs.frozen(kw_only=True)
class H3Outcome:
    """What one request saw: whether the handshake completed (for the client), the response if any, the close."""

    handshake_completed: bool
    status: int | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    body: bytes = b""
    close: H3Close | None = None
    """How the server closed the connection before answering (None when it answered)."""

    def json(self) -> Any:
        return json.loads(self.body)


async def h3_request(
    host: str,
    port: int,
    *,
    server_name: str,
    trust_pem: bytes,
    authority: str,
    path: str = "/",
    headers: Mapping[str, str] | None = None,
    client: MintedSvid | None = None,
) -> H3Outcome:
    """Send one HTTP/3 GET to `host:port` (SNI `server_name`, ALPN h3) and return what happened.

    The server's certificate must chain to `trust_pem` and name `server_name`; `client` is the certificate the
    client presents when asked (None: it answers a certificate request with an empty Certificate); `headers` are
    sent after the pseudo-headers (names in lower case). It waits for a response or a close as long as QUIC's idle
    timeout (aioquic's default, 60 s) allows: the caller bounds it with `trio.fail_after`.
    """
    configuration = QuicConfiguration(is_client=True, alpn_protocols=list(H3_ALPN), server_name=server_name)
    configuration.load_verify_locations(cadata=trust_pem)
    if client is not None:
        chain = x509.load_pem_x509_certificates(client.cert_chain_pem)
        key = load_pem_private_key(client.private_key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        configuration.certificate, configuration.certificate_chain = chain[0], chain[1:]
        configuration.private_key = key
    quic = QuicConnection(configuration=configuration)
    http = H3Connection(quic)
    request = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", authority.encode()),
        (b":path", path.encode()),
        *((name.encode(), value.encode()) for name, value in (headers or {}).items()),
    ]
    completed = False
    status: int | None = None
    response_headers: dict[str, str] = {}
    body = bytearray()
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.connect((host, port))
        quic.connect((host, port), now=trio.current_time())
        while True:
            for datagram, _ in quic.datagrams_to_send(now=trio.current_time()):
                await sock.send(datagram)
            timer = quic.get_timer()
            with trio.move_on_at(math.inf if timer is None else timer) as waited:
                incoming = await sock.recv(_RECEIVE_SIZE)
            if waited.cancelled_caught:
                quic.handle_timer(now=trio.current_time())
            else:
                quic.receive_datagram(incoming, (host, port), now=trio.current_time())
            while (event := quic.next_event()) is not None:
                if isinstance(event, HandshakeCompleted):
                    completed = True
                    http.send_headers(quic.get_next_available_stream_id(), request, end_stream=True)
                elif isinstance(event, ConnectionTerminated):
                    close = H3Close(
                        error_code=event.error_code, frame_type=event.frame_type, reason=event.reason_phrase
                    )
                    return H3Outcome(handshake_completed=completed, close=close)
                for received in http.handle_event(event):
                    if isinstance(received, HeadersReceived):
                        response_headers.update(
                            (name.decode(), value.decode()) for name, value in received.headers
                        )
                        if ":status" in response_headers:  # not on trailers
                            status = int(response_headers.pop(":status"))
                    elif isinstance(received, DataReceived):
                        body += received.data
                    else:
                        continue
                    if received.stream_ended:
                        quic.close()
                        for datagram, _ in quic.datagrams_to_send(now=trio.current_time()):
                            await sock.send(datagram)
                        return H3Outcome(
                            handshake_completed=completed,
                            status=status,
                            headers=response_headers,
                            body=bytes(body),
                        )
