"""Server-streaming calls to the SPIFFE endpoints over purerpc: start one with the endpoint's security header, read
its messages, and turn how it ended into an exception.

Both SPIFFE endpoints require a static metadata header on every call (an SSRF guard): the Workload Endpoint
`workload.spiffe.io: true`, the Broker Endpoint `broker.spiffe.io: true`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import purerpc
import trio
from google.protobuf.message import Message
from purerpc.grpc_proto import GRPCProtoSocket
from purerpc.grpclib.events import ResponseEnded
from purerpc.grpclib.exceptions import raise_status

from aether.rpc.backoff import Backoff
from aether.rpc.compat import cancel_client_stream

__all__ = ["BROKER_HEADER", "SPIFFE_BACKOFF", "WORKLOAD_HEADER", "server_stream"]

ResponseT = TypeVar("ResponseT", bound=Message)

WORKLOAD_HEADER = ("workload.spiffe.io", "true")
"""The metadata every call to the SPIFFE Workload Endpoint carries."""
BROKER_HEADER = ("broker.spiffe.io", "true")
"""The metadata every call to the SPIFFE Broker Endpoint carries."""
SPIFFE_BACKOFF = Backoff(base=0.1, cap=5.0)
"""Redials of the SPIFFE endpoints: capped lower than the registrar's (10 s), so that the agent is back on its
SPIRE agent within 5 s of that agent's return (a SPIRE agent restarted, or down for a minute). The registrar's cap
protects one server shared by every node; a SPIFFE endpoint is the node's own Unix socket with one client per
role, so a dial every 2.5-5 s while it is down costs nothing and floods no one."""


async def server_stream(
    grpc_socket: GRPCProtoSocket,
    *,
    service: str,
    method: str,
    request: Message,
    response_type: type[ResponseT],
    header: tuple[str, str],
    scheme: str = "http",
) -> AsyncIterator[ResponseT]:
    """Call the server-streaming `service`/`method` with `request` and `header`; yield each response message.

    Raises:
        purerpc.RpcFailedError: The server ended the stream with a status other than OK (its subclass for the
            status: `purerpc.NotFoundError`, `purerpc.PermissionDeniedError`, ...).
        purerpc.UnavailableError: The stream ended without any status (the server went away mid-answer), or
            ended OK (a stream of these APIs never ends while the server serves).
    """
    stream: Any = await grpc_socket.start_request(
        scheme,
        service,
        method,
        request.DESCRIPTOR.full_name,
        "localhost",
        custom_metadata=(header,),
    )
    stream.expect_message_type(response_type)
    try:
        await stream.send_message(request)
        await stream.close()
        while True:
            message = await stream.receive_message()
            if message is None:
                event = stream.end_stream_event
                if isinstance(event, ResponseEnded):
                    raise_status(event.status)
                raise purerpc.UnavailableError(f"{service}/{method}: the stream ended")
            assert isinstance(message, response_type), f"{service}/{method} answered {type(message).__name__}"
            yield message
    finally:
        # The caller stopped reading (a pod left, a task was cancelled): the server must stop answering too.
        with trio.CancelScope(shield=True):
            await cancel_client_stream(grpc_socket, stream)
