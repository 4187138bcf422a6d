"""What every control plane (agent, edge) runs: `open_plane` (the journal, the projection into the snapshot cache,
the xDS server, SVID files, the admin socket), the journal (the sole owner of the log and the state), and the
replay that rebuilds the state at start-up and offline.

Names are imported on first use (PEP 562): `aether status` reads `aether.plane.admin_client` (the standard library
only) without loading the journal, trio or the xDS server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aether.plane.admin import Documents, HasStatistics, plane_documents, serve_admin
    from aether.plane.admin_client import DEFAULT_ADMIN_SOCKET, fetch_admin, render_status
    from aether.plane.collector import collector_deferred, collector_paused
    from aether.plane.journal import CHECKPOINT_EVERY, MAX_BATCH, Journal, JournalStatistics, open_journal
    from aether.plane.plane import DEFAULT_XDS_SOCKET, Plane, Projection, open_plane
    from aether.plane.publisher import Publisher, PublisherStatistics
    from aether.plane.replay import (
        Contribution,
        Replay,
        UndecodableRecordError,
        checkpoint_problems,
        decode_record,
        decoded_records,
        explain_resource,
        replay_log,
        resume_replay,
    )

_MODULE_OF = {
    "Documents": "admin",
    "HasStatistics": "admin",
    "plane_documents": "admin",
    "serve_admin": "admin",
    "DEFAULT_ADMIN_SOCKET": "admin_client",
    "fetch_admin": "admin_client",
    "render_status": "admin_client",
    "collector_deferred": "collector",
    "collector_paused": "collector",
    "CHECKPOINT_EVERY": "journal",
    "MAX_BATCH": "journal",
    "Journal": "journal",
    "JournalStatistics": "journal",
    "open_journal": "journal",
    "DEFAULT_XDS_SOCKET": "plane",
    "Plane": "plane",
    "Projection": "plane",
    "open_plane": "plane",
    "Publisher": "publisher",
    "PublisherStatistics": "publisher",
    "Contribution": "replay",
    "Replay": "replay",
    "UndecodableRecordError": "replay",
    "checkpoint_problems": "replay",
    "decode_record": "replay",
    "decoded_records": "replay",
    "explain_resource": "replay",
    "replay_log": "replay",
    "resume_replay": "replay",
}
"""Each exported name and the module of this package that defines it."""

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
    "Publisher",
    "PublisherStatistics",
    "Replay",
    "UndecodableRecordError",
    "checkpoint_problems",
    "collector_deferred",
    "collector_paused",
    "decode_record",
    "decoded_records",
    "explain_resource",
    "fetch_admin",
    "open_journal",
    "open_plane",
    "plane_documents",
    "render_status",
    "replay_log",
    "resume_replay",
    "serve_admin",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"aether.plane.{module}"), name)
