"""The part every control plane runs (agent, edge): journal, projection into the snapshot cache, xDS server, SVID
files, and — once the role's own sources run — the xDS listener and the admin socket.

    sources ──events──▶ journal (log + state) ──state──▶ project ──snapshot──▶ cache ──▶ xDS server ──▶ Envoy
       ▲                                                                                     │
       └──────────────────────────── ACK / NACK / on-demand events ◀─────────────────────────┘
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import attrs
import trio

from aether.core.snapshot import Snapshot
from aether.core.state import State
from aether.identity.files import serve_svid_files
from aether.plane.admin import Documents, HasStatistics, plane_documents, serve_admin
from aether.plane.journal import Journal, open_journal
from aether.plane.publisher import Publisher
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer

__all__ = ["DEFAULT_XDS_SOCKET", "Plane", "Projection", "open_plane"]

DEFAULT_XDS_SOCKET = Path("/run/aether/xds.sock")
"""Where a control plane serves xDS to its Envoy (the agent: the node's Envoy)."""

Projection = Callable[[State, int], Snapshot]
"""`project(state, now)`: the role's snapshot of a folded state; `now` is when the last record was observed (ns)."""


@attrs.frozen(kw_only=True, eq=False)
class Plane:
    """An open control plane: the role's sources send events to `journal`; `cache` holds the published snapshots."""

    journal: Journal
    cache: SnapshotCache
    server: XdsServer
    publisher: Publisher
    """Between the projection and `cache`: it withholds an inconsistent snapshot."""

    async def serve(
        self,
        *,
        xds: ListenAddress,
        admin_socket: Path,
        parts: Mapping[str, HasStatistics],
        documents: Documents | None = None,
        task_status: trio.TaskStatus[ListenAddress] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve xDS at `xds` and the admin documents (with the counters of the publisher and of the role's `parts`)
        on `admin_socket` until cancelled; `task_status.started` receives where xDS is served (the real port when
        port 0 was asked). The role's own `documents` are served beside the plane's."""
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(functools.partial(serve_grpc, [self.server.service()], listen=xds))
            served = dict(plane_documents(self.journal, self.server, publisher=self.publisher, **parts))
            served.update(documents or {})
            await nursery.start(functools.partial(serve_admin, path=admin_socket, documents=served))
            task_status.started(bound)


@contextlib.asynccontextmanager
async def open_plane(
    log_dir: Path, *, project: Projection, svid_dir: Path | None = None
) -> AsyncIterator[Plane]:
    """Open the journal in `log_dir` and, for the block, publish `project(state, now)` after every batch (unless it
    is inconsistent: `aether.plane.publisher`), run the xDS server and, with `svid_dir`, the SVID file source
    (`aether.identity.files`).

    Start-up replays the log first, so the first snapshot published is the one served before a restart; Envoy can
    have it as soon as the role calls `Plane.serve`, before any source of the role has reconnected.

    Resource handling:
        The plane's tasks live for the block; a role starts its sources in a nursery inside it, so they end first.
    """
    async with open_journal(log_dir) as journal, trio.open_nursery() as nursery:
        cache = SnapshotCache()
        publisher = Publisher(cache, project=project)
        journal.subscribe(publisher)
        server = XdsServer(cache, feedback=journal.sender())
        await nursery.start(server.serve)
        if svid_dir is not None:
            await nursery.start(functools.partial(serve_svid_files, svid_dir, send=journal.sender()))
        yield Plane(journal=journal, cache=cache, server=server, publisher=publisher)
        nursery.cancel_scope.cancel()
