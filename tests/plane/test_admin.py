"""The admin endpoint serves JSON documents on a Unix socket (mode 0660) and `aether status` renders them."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import trio

from aether.core.snapshot import SHORT_NAMES, TYPE_ORDER
from aether.plane.admin import serve_admin
from aether.plane.admin_client import NACKED, STATUS_COLUMNS, fetch_admin, render_status
from aether.xds.protocol import TypeStatus

DOCUMENT = {
    "streams": [
        {
            "streamId": 1,
            "nodeId": "node-a",
            "mode": "delta",
            "types": [
                {"type": "CDS", "status": "SYNCED", "ackedVersion": "v1", "sentVersion": "v1", "error": ""},
                {
                    "type": "LDS",
                    "status": "NACKED",
                    "ackedVersion": "v1",
                    "sentVersion": "v2",
                    "error": "bad port",
                },
            ],
        }
    ]
}


async def test_the_admin_socket_serves_documents_and_refuses_unknown_paths(tmp_path: Path) -> None:
    """GET /status returns the document; an unknown path is a 404 naming the known ones; the socket is 0660."""
    path = tmp_path / "run" / "admin.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_admin(
                path=path, documents={"/status": lambda: DOCUMENT}, task_status=task_status
            )
        )
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        assert await trio.to_thread.run_sync(fetch_admin, path, "/status") == DOCUMENT
        with pytest.raises(ValueError, match=r"^admin '/nope' answered b'HTTP/1.0 404 Not Found'"):
            await trio.to_thread.run_sync(fetch_admin, path, "/nope")
        nursery.cancel_scope.cancel()
    assert not path.exists()


def test_status_renders_one_row_per_stream_and_the_nack_errors() -> None:
    """Columns per type in ADS order; a type the stream never asked for shows '-'; NACK errors follow."""
    assert render_status(DOCUMENT) == [
        "NODE    STREAM  MODE   CDS     EDS  LDS     RDS  SDS",
        "node-a  1       DELTA  SYNCED  -    NACKED  -    -",
        "node-a stream 1 LDS NACKED: bad port",
    ]


def test_the_clients_columns_and_nack_status_are_the_servers() -> None:
    """The light client spells the type columns and NACKED itself; they are the snapshot's and the server's."""
    assert (
        tuple(SHORT_NAMES[type_url] for type_url in TYPE_ORDER),
        TypeStatus.NACKED.value,
    ) == (STATUS_COLUMNS, NACKED)
