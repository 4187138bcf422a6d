"""The client side of the agent's admin socket (`aether status`): fetch a JSON document, render the status table.

Light on purpose (the standard library only, blocking calls): the command line imports it without the agent or trio.
Not even h11, which the server speaks (through `aether.http1`): `http.client` parses the one response here, so no
HTTP/1 is parsed by hand, and `aether status` imports nothing beyond the standard library.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_ADMIN_SOCKET",
    "FETCH_TIMEOUT",
    "NACKED",
    "STATUS_COLUMNS",
    "fetch_admin",
    "render_status",
]

DEFAULT_ADMIN_SOCKET = Path("/run/aether/admin.sock")
STATUS_COLUMNS = ("CDS", "EDS", "LDS", "RDS", "SDS")
"""The status table's type columns, in ADS order (`aether.core.snapshot`'s short names; a test keeps them equal)."""
FETCH_TIMEOUT = 5.0
"""Seconds `fetch_admin` waits for the agent (a stuck agent must not hang `aether status`)."""
NACKED = "NACKED"
"""The status of a type whose last response Envoy rejected (`aether.xds.protocol.TypeStatus.NACKED`)."""


def fetch_admin(path: Path, target: str, *, timeout: float = FETCH_TIMEOUT) -> dict[str, Any]:
    """GET `target` from the admin socket at `path` and return its JSON document (blocking; from trio, run it in a
    thread).

    Raises:
        OSError: nothing listens at `path`, or it did not answer within `timeout` seconds (`TimeoutError`).
        ValueError: the answer is not a 200 with a JSON body (or not HTTP at all: `http.client.HTTPException`s are
            translated).
    """
    connection = _UnixHTTPConnection(path, timeout=timeout)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        body = response.read()
    except http.client.HTTPException as error:
        raise ValueError(f"admin {target!r}: not an HTTP answer ({error!r})") from error
    finally:
        connection.close()
    if response.status != 200:
        status_line = f"HTTP/{response.version / 10:.1f} {response.status} {response.reason}".encode()
        raise ValueError(f"admin {target!r} answered {status_line!r}: {body[:200]!r}")
    document: dict[str, Any] = json.loads(body)
    return document


class _UnixHTTPConnection(http.client.HTTPConnection):
    """The standard library's HTTP/1.1 client, connected to a Unix socket instead of a TCP address."""

    def __init__(self, path: Path, *, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(self.timeout)
        try:
            connection.connect(str(self._path))
        except OSError:
            connection.close()
            raise
        self.sock = connection


def render_status(document: dict[str, Any]) -> list[str]:
    """Return the table lines of a status document: node, stream, mode, then each type's status; NACK errors last."""
    header = ["NODE", "STREAM", "MODE", *STATUS_COLUMNS]
    rows = [header]
    errors: list[str] = []
    for stream in document["streams"]:
        by_type = {item["type"]: item for item in stream["types"]}
        cells = [stream["nodeId"], str(stream["streamId"]), stream["mode"].upper()]
        for column in STATUS_COLUMNS:
            item = by_type.get(column)
            cells.append("-" if item is None else item["status"])
            if item is not None and item["status"] == NACKED:
                errors.append(
                    f"{stream['nodeId']} stream {stream['streamId']} {column} NACKED: {item['error']}"
                )
        rows.append(cells)
    widths = [max(len(row[index]) for row in rows) for index in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return lines + errors
