"""Stream status like `istioctl proxy-status`, as the document the admin socket serves (one entry per connected Envoy
stream, one row per type); `aether.plane.admin_client.render_status` renders it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aether.xds.protocol import TypeStatusRow
from aether.xds.server import StreamStatus


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


def rows_by_type(rows: Sequence[TypeStatusRow]) -> dict[str, TypeStatusRow]:
    """Index a stream's rows by short type name (CDS, EDS, ...)."""
    return {row.short_type: row for row in rows}
