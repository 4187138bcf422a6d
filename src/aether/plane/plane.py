"""The part every control plane runs (agent, edge): journal, projection into the snapshot cache, xDS server, SVID
files, and — once the role's own sources run — the xDS listener and the admin socket.

    sources ──events──▶ journal (log + state) ──state──▶ project ──snapshot──▶ cache ──▶ xDS server ──▶ Envoy
       ▲                                                                                     │
       └──────────────────────────── ACK / NACK / on-demand events ◀─────────────────────────┘
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import attrs
import trio

from aether.core.snapshot import Snapshot
from aether.core.state import State
from aether.identity.files import serve_svid_files
from aether.log import LogError, LogLock, LogLockedError, lock_log, tail_mark, wait_lock_log
from aether.plane.admin import Documents, HasStatistics, plane_documents, serve_admin
from aether.plane.journal import Journal, open_journal
from aether.plane.memory import tune_allocator
from aether.plane.publisher import Publisher
from aether.plane.replay import Replay, replay_log, resume_replay
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer

__all__ = ["DEFAULT_XDS_SOCKET", "Plane", "Projection", "open_plane"]

DEFAULT_XDS_SOCKET = Path("/run/aether/xds.sock")
"""Where a control plane serves xDS to its Envoy (the agent: the node's Envoy)."""

FOLLOW_INTERVAL = 1.0
"""Seconds between a standby's looks at the owner's log: the tail it folds at take-over stays about a second's worth
of records. A look at a log that did not grow is a `stat` of its newest segment; one that grew re-reads that segment
(up to 64 MiB, checksummed) and folds the new records."""

_log = logging.getLogger(__name__)

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
            bound = await nursery.start(functools.partial(serve_grpc, self.server.services(), listen=xds))
            served = dict(plane_documents(self.journal, self.server, publisher=self.publisher, **parts))
            served.update(documents or {})
            await nursery.start(functools.partial(serve_admin, path=admin_socket, documents=served))
            task_status.started(bound)


@contextlib.asynccontextmanager
async def open_plane(
    log_dir: Path, *, project: Projection, svid_dir: Path | None = None, standby: bool = False
) -> AsyncIterator[Plane]:
    """Own the log in `log_dir`, open the journal there and, for the block, publish `project(state, now)` after
    every batch (unless it is inconsistent: `aether.plane.publisher`), run the xDS server and, with `svid_dir`, the
    SVID file source (`aether.identity.files`).

    Start-up replays the log first, so the first snapshot published is the one served before a restart; Envoy can
    have it as soon as the role calls `Plane.serve`, before any source of the role has reconnected.

    One process owns a log (`aether.log.lock`). When another does, `open_plane` raises `LogLockedError` naming its
    pid; with `standby`, it instead replays the owner's log read-only and publishes that snapshot, follows the log
    while it waits, and enters the block (where the role starts its sources and binds its sockets) the moment the
    owner's lock is released, after folding the records the owner wrote last.

    Raises:
        LogLockedError: Another process owns the log and `standby` is False.

    Resource handling:
        The plane's tasks live for the block; a role starts its sources in a nursery inside it, so they end first.
    """
    tune_allocator()
    cache = SnapshotCache()
    publisher = Publisher(cache, project=project)
    lock: LogLock | None = None
    warm: Replay | None = None
    if standby:
        lock, warm = await _stand_by(log_dir, publisher)
    async with open_journal(log_dir, lock=lock, warm=warm) as journal, trio.open_nursery() as nursery:
        journal.subscribe(publisher)
        server = XdsServer(cache, feedback=journal.sender())
        await nursery.start(server.serve)
        if svid_dir is not None:
            await nursery.start(functools.partial(serve_svid_files, svid_dir, send=journal.sender()))
        yield Plane(journal=journal, cache=cache, server=server, publisher=publisher)
        nursery.cancel_scope.cancel()


async def _stand_by(log_dir: Path, publisher: Publisher) -> tuple[LogLock, Replay | None]:
    """Take the log's lock, now or once its owner releases it; meanwhile keep `publisher` fed from the owner's log.

    Returns:
        The held lock, and the replay the standby made (None when it owned the log at once or could not read it).
    """
    try:
        return await trio.to_thread.run_sync(lock_log, log_dir), None
    except LogLockedError as error:
        _log.warning("%s: standing by, following the log until the owner exits", error)
    warm: Replay | None = None
    async with trio.open_nursery() as nursery:

        async def follow() -> None:
            nonlocal warm
            seen: object = ()
            while True:
                with contextlib.suppress(OSError):
                    mark = await trio.to_thread.run_sync(tail_mark, log_dir)
                    if mark != seen and (replay := await _follow_step(log_dir, warm, publisher)) is not None:
                        warm, seen = replay, mark
                await trio.sleep(FOLLOW_INTERVAL)

        nursery.start_soon(follow)
        lock = await wait_lock_log(log_dir)
        nursery.cancel_scope.cancel()
    _log.warning(
        "%s: took over the log (its owner exited); serving from seq %s", log_dir, warm and warm.state.seq
    )
    return lock, warm


async def _follow_step(log_dir: Path, warm: Replay | None, publisher: Publisher) -> Replay | None:
    """Fold what the owner appended since `warm` (read-only) and publish the snapshot; return the new replay, or None
    when the owner changed the log under the reader (retention, a segment rolling over): the next look tries again."""
    try:
        replay = await trio.to_thread.run_sync(
            replay_log if warm is None else functools.partial(resume_replay, since=warm), log_dir
        )
    except (LogError, OSError) as error:
        _log.info("%s: standby could not read the owner's log yet (%s); trying again", log_dir, error)
        return None
    if warm is None or replay.state is not warm.state:
        publisher(replay.state, replay.last_observed_at)
    return replay
