"""What every control plane (agent, edge) runs: `open_plane` (the journal, the projection into the snapshot cache,
the xDS server, SVID files, the admin socket), the journal (the sole owner of the log and the state), and the
replay that rebuilds the state at start-up and offline."""

from __future__ import annotations

from aether.plane.admin import (
    DEFAULT_ADMIN_SOCKET,
    Documents,
    HasStatistics,
    fetch_admin,
    plane_documents,
    serve_admin,
)
from aether.plane.journal import CHECKPOINT_EVERY, MAX_BATCH, Journal, JournalStatistics, open_journal
from aether.plane.plane import DEFAULT_XDS_SOCKET, Plane, Projection, open_plane
from aether.plane.replay import (
    Contribution,
    Replay,
    UndecodableRecordError,
    checkpoint_problems,
    collector_paused,
    decode_record,
    decoded_records,
    explain_resource,
    replay_log,
)

__all__ = [
    "CHECKPOINT_EVERY",
    "DEFAULT_ADMIN_SOCKET",
    "DEFAULT_XDS_SOCKET",
    "MAX_BATCH",
    "Contribution",
    "Documents",
    "HasStatistics",
    "Journal",
    "JournalStatistics",
    "Plane",
    "Projection",
    "Replay",
    "UndecodableRecordError",
    "checkpoint_problems",
    "collector_paused",
    "decode_record",
    "decoded_records",
    "explain_resource",
    "fetch_admin",
    "open_journal",
    "open_plane",
    "plane_documents",
    "replay_log",
    "serve_admin",
]
