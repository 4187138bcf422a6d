"""A control plane's admin endpoint (agent, edge): read-only JSON documents over HTTP/1 (`aether.http1`) on a Unix socket (`aether
status` reads it, through `aether.plane.admin_client`).

Only the plane's own user (and group) can connect: the socket is mode 0660 and never on TCP.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
from collections.abc import Callable, Mapping
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from aether.core.state import summarize
from aether.http1 import HttpConnection, HttpProtocolError, HttpRequest
from aether.xds.status import status_document

__all__ = [
    "Documents",
    "HasStatistics",
    "plane_documents",
    "serve_admin",
]

if TYPE_CHECKING:
    from aether.plane.journal import Journal
    from aether.xds.server import XdsServer

MAX_REQUEST_BYTES = 8192
"""A request line plus headers; anything longer is not a client of ours (answered 431)."""
REQUEST_TIMEOUT = 5
"""Seconds a client has to send its request (a stuck client must not hold a task forever)."""

Documents = Mapping[str, Callable[[], dict[str, Any]]]
"""Path (e.g. `/status`) → function returning the JSON document served there."""


class HasStatistics(Protocol):
    """A part of a control plane that reports counters (STYLE C11)."""

    def statistics(self) -> Any: ...


def plane_documents(journal: Journal, server: XdsServer, **parts: HasStatistics) -> Documents:
    """The documents of a control plane (agent or edge): `/status` (per Envoy stream and type), `/state` (a summary
    of the folded state) and `/statistics` (the journal's, the xDS server's and each of `parts`'s counters)."""

    def statistics() -> dict[str, Any]:
        counters: dict[str, Any] = {"journal": journal.statistics(), "xds": server.statistics()}
        counters.update((name, part.statistics()) for name, part in parts.items())
        return {name: attrs.asdict(value) for name, value in counters.items()}

    return {
        "/status": lambda: status_document(server.status()),
        "/state": lambda: attrs.asdict(summarize(journal.state)),
        "/statistics": statistics,
    }


async def serve_admin(
    *, path: Path, documents: Documents, task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve `documents` on the Unix socket `path` until cancelled; the socket file is removed on exit."""
    await trio.Path(path.parent).mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        await trio.Path(path).unlink()
    listener_socket = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await listener_socket.bind(str(path))
        os.chmod(path, 0o660)
        listener_socket.listen()
        listener = trio.SocketListener(listener_socket)
        task_status.started(path)
        await trio.serve_listeners(functools.partial(_answer, documents=documents), [listener])
    finally:
        listener_socket.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # in `finally` even when cancelled: a quick syscall, no checkpoint wanted


async def _answer(stream: trio.SocketStream, *, documents: Documents) -> None:
    async with stream:
        connection = HttpConnection(
            stream, client=False, peer="admin client", max_head_size=MAX_REQUEST_BYTES
        )
        status, document = HTTPStatus.REQUEST_TIMEOUT, {"error": f"no request within {REQUEST_TIMEOUT} s"}
        with trio.move_on_after(REQUEST_TIMEOUT):
            try:
                request = await connection.receive_request()
            except HttpProtocolError as exc:
                status, document = HTTPStatus(exc.status_hint), {"error": f"bad request: {exc.problem}"}
            except trio.BrokenResourceError:
                return
            else:
                if request is None:
                    return  # the client left before it asked anything
                status, document = _document(request, documents)
        body = json.dumps(document, sort_keys=True).encode()
        headers = [("Content-Type", "application/json"), ("Connection", "close")]
        with contextlib.suppress(trio.BrokenResourceError):
            await connection.send_response(status.value, headers=headers, body=body)


def _document(request: HttpRequest, documents: Documents) -> tuple[HTTPStatus, dict[str, Any]]:
    produce = documents.get(request.target)
    if request.method != "GET" or produce is None:
        return HTTPStatus.NOT_FOUND, {
            "error": f"not found: {request.target!r}; try one of {sorted(documents)!r}"
        }
    return HTTPStatus.OK, produce()
