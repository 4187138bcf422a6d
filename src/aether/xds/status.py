"""Rendering stream status like `istioctl proxy-status`: one row per connected Envoy stream, one column per type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aether.core.snapshot import SHORT_NAMES, TYPE_ORDER
from aether.xds.protocol import TypeStatus, TypeStatusRow
from aether.xds.server import StreamStatus

_COLUMNS = [SHORT_NAMES[type_url] for type_url in TYPE_ORDER]


def status_document(streams: Sequence[StreamStatus]) -> dict[str, Any]:
    """Return the streams' status as a JSON-ready document (what the agent's admin endpoint serves)."""
    return {
        "streams": [
            {
                "streamId": stream.stream_id,
                "nodeId": stream.node_id,
                "mode": stream.mode,
                "types": [
                    {
                        "type": row.short_type,
                        "status": row.status.value,
                        "ackedVersion": row.acked_version,
                        "sentVersion": row.sent_version,
                        "error": row.error,
                    }
                    for row in stream.types
                ],
            }
            for stream in streams
        ]
    }


def render_status(document: dict[str, Any]) -> list[str]:
    """Return the table lines of a status document: node, stream, mode, then each type's status; NACK errors last."""
    header = ["NODE", "STREAM", "MODE", *_COLUMNS]
    rows = [header]
    errors: list[str] = []
    for stream in document["streams"]:
        by_type = {item["type"]: item for item in stream["types"]}
        cells = [stream["nodeId"], str(stream["streamId"]), stream["mode"].upper()]
        for column in _COLUMNS:
            item = by_type.get(column)
            cells.append("-" if item is None else item["status"])
            if item is not None and item["status"] == TypeStatus.NACKED.value:
                errors.append(
                    f"{stream['nodeId']} stream {stream['streamId']} {column} NACKED: {item['error']}"
                )
        rows.append(cells)
    widths = [max(len(row[index]) for row in rows) for index in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return lines + errors


def rows_by_type(rows: Sequence[TypeStatusRow]) -> dict[str, TypeStatusRow]:
    """Index a stream's rows by short type name (CDS, EDS, ...)."""
    return {row.short_type: row for row in rows}
