"""The admission webhooks over HTTPS: HTTP/1.1 by h11 over `trio.SSLStream`, on every replica (not only the leader).

Each connection is kept alive for the API server's next review. A request is read whole (at most
`MAX_REVIEW_BYTES`) within `REQUEST_TIMEOUT`, answered by `aether.controller.review.answer_review`, and written
back; a client that speaks broken HTTP or TLS loses its own connection only, and the server goes on.

Hypercorn (the ASGI server with a trio worker) was the other candidate; version 0.18 requires h2 >= 4.3 while
purerpc 0.8 (the xDS server) pins h2 < 4, so the two cannot be installed together.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import attrs
import h11
import trio

from aether.controller.instrumentation import ReviewRecorder
from aether.controller.pod_mutation import PodMutation
from aether.controller.review import answer_review
from aether.controller.route_admission import GatewayOwner, every_gateway
from aether.core.events import MeshConfig
from aether.telemetry import current_telemetry

__all__ = ["DEFAULT_WEBHOOK_PORT", "MAX_REVIEW_BYTES", "WebhookServer", "WebhookStatistics"]

LOG = logging.getLogger("aether.controller.webhooks")

DEFAULT_WEBHOOK_PORT = 9443
MAX_REVIEW_BYTES = 8 * 1024 * 1024
"""An AdmissionReview carries the object and the old object: the API server's 3 MiB object limit, twice, and room."""
REQUEST_TIMEOUT = 10.0
"""Seconds a client has to send a whole request once it started one (the API server's default webhook timeout)."""
IDLE_TIMEOUT = 90.0
"""Seconds a kept-alive connection may wait for its next request (Go's http.Transport idles 90 s)."""
_RECEIVE_SIZE = 65536


def no_mesh_config() -> None:
    """The MeshConfig source of a server whose mutation's own domains stand (none in force)."""
    return None


@attrs.frozen(kw_only=True)
class WebhookStatistics:
    """Counters of a `WebhookServer`."""

    connections: int
    reviews: int
    """Reviews answered with 200 (allowed or denied)."""
    denied: int
    patched: int
    """Reviews answered with a non-empty JSONPatch."""
    bad_requests: int
    """Requests answered 4xx: not an AdmissionReview, unknown path, wrong method, broken HTTP."""


class WebhookServer:
    """Serves the webhooks with one TLS context; `serve` runs until cancelled."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        mutation: PodMutation,
        mesh_config: Callable[[], MeshConfig | None] = no_mesh_config,
        owns_gateway: GatewayOwner = every_gateway,
    ) -> None:
        self.ssl_context = ssl_context
        self.mutation = mutation
        self.mesh_config = mesh_config
        """The MeshConfig in force now (the projected one, flags applied), or None to keep `mutation`'s domains."""
        self.owns_gateway = owns_gateway
        """Which Gateways are ours: routes of other implementations' Gateways are not judged."""
        self.port = 0
        """The port listened on, once `serve` started."""
        self._counts = {"connections": 0, "reviews": 0, "denied": 0, "patched": 0, "bad_requests": 0}
        self._recorder = ReviewRecorder(current_telemetry())

    def statistics(self) -> WebhookStatistics:
        """Return the counters."""
        return WebhookStatistics(**self._counts)

    def current_mutation(self) -> PodMutation:
        """`mutation`, with the trust and mesh domains of the MeshConfig in force when `mesh_config()` gives one."""
        config = self.mesh_config()
        mutation = self.mutation
        if config is None or (config.trust_domain, config.mesh_domain) == (
            mutation.trust_domain,
            mutation.mesh_domain,
        ):
            return mutation
        return attrs.evolve(mutation, trust_domain=config.trust_domain, mesh_domain=config.mesh_domain)

    async def serve(
        self, *, host: str, port: int, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on `host:port` (0: a free port) and serve until cancelled; `task_status` gets the port."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, tcp: trio.SocketStream) -> None:
        self._counts["connections"] += 1
        stream = trio.SSLStream(tcp, self.ssl_context, server_side=True)
        try:
            with trio.fail_after(REQUEST_TIMEOUT):
                await stream.do_handshake()
            connection = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
            while await self._exchange(connection, stream):
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as error:
            LOG.debug("webhook connection ended: %r", error)
        finally:
            await trio.aclose_forcefully(stream)

    async def _exchange(self, connection: h11.Connection, stream: trio.SSLStream[trio.SocketStream]) -> bool:
        """Read one request and answer it; return whether the connection may serve another."""
        try:
            received = await _receive(connection, stream)
        except h11.RemoteProtocolError as error:
            self._counts["bad_requests"] += 1
            if connection.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = HTTPStatus(error.error_status_hint)
                await _send(connection, stream, status, {"error": f"bad HTTP request: {error}"})
            return False
        if received is None:
            return False
        request, body = received
        started = time.time_ns()
        path = request.target.decode("ascii", "replace").partition("?")[0]
        if request.method != b"POST":
            status, answer = HTTPStatus.METHOD_NOT_ALLOWED, {"error": "webhooks answer POST only"}
        elif body is None:
            status, answer = (
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                {"error": f"an AdmissionReview must be at most {MAX_REVIEW_BYTES} bytes"},
            )
        else:
            status, answer = answer_review(
                path, body, mutation=self.current_mutation(), owns_gateway=self.owns_gateway
            )
        self._count(status, answer)
        await _send(connection, stream, status, answer)
        if self._recorder.enabled:
            self._recorder.reviewed(path, status, answer, started=started)
        return connection.our_state is h11.DONE and connection.their_state is h11.DONE

    def _count(self, status: HTTPStatus, answer: dict[str, Any]) -> None:
        if status is not HTTPStatus.OK:
            self._counts["bad_requests"] += 1
            return
        self._counts["reviews"] += 1
        response = answer["response"]
        self._counts["denied"] += not response["allowed"]
        self._counts["patched"] += "patch" in response


async def _receive(
    connection: h11.Connection, stream: trio.abc.Stream
) -> tuple[h11.Request, bytes | None] | None:
    """One request and its body (None when over `MAX_REVIEW_BYTES`); None when the client closed first."""
    request: h11.Request | None = None
    body = bytearray()
    too_large = False
    with trio.move_on_after(IDLE_TIMEOUT) as idle:
        while request is None:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(bytes(await stream.receive_some(_RECEIVE_SIZE)))
            elif isinstance(event, h11.Request):
                request = event
            else:
                return None  # ConnectionClosed (or PAUSED: a client that pipelined past a closed cycle)
    if idle.cancelled_caught or request is None:
        return None
    with trio.fail_after(REQUEST_TIMEOUT):
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(bytes(await stream.receive_some(_RECEIVE_SIZE)))
            elif isinstance(event, h11.Data):
                too_large = too_large or len(body) + len(event.data) > MAX_REVIEW_BYTES
                if not too_large:
                    body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return request, None if too_large else bytes(body)
            else:
                return None


async def _send(
    connection: h11.Connection, stream: trio.abc.Stream, status: HTTPStatus, document: dict[str, Any]
) -> None:
    body = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    data = b"".join(
        connection.send(event) or b""
        for event in (
            h11.Response(status_code=status.value, reason=status.phrase.encode(), headers=headers),
            h11.Data(data=body),
            h11.EndOfMessage(),
        )
    )
    await stream.send_all(data)
