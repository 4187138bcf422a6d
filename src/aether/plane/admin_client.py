"""The client side of the agent's admin socket (`aether status`): fetch a JSON document, render the status table.

Light on purpose (the standard library only, blocking calls): the command line imports it without the agent or trio.
Not even h11, which the server speaks: it would double what `aether status` imports, to read one response whose
server closes the connection after it (so the body is what follows the head).
"""

from __future__ import annotations

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
        ValueError: the answer is not a 200 with a JSON body.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(str(path))
        connection.sendall(f"GET {target} HTTP/1.0\r\n\r\n".encode())
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    version, _, status = head.partition(b" ")
    if not version.startswith(b"HTTP/1.") or not status.startswith(b"200 "):
        raise ValueError(
            f"admin {target!r} answered {head.splitlines()[0] if head else b''!r}: {body[:200]!r}"
        )
    document: dict[str, Any] = json.loads(body)
    return document


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
