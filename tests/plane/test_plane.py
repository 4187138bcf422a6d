"""`open_plane` publishes the role's projection of every batch (but an inconsistent one), replays it after a restart,
and `Plane.serve` serves xDS and the admin documents with the role's parts' counters."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

import attrs
import pytest
import trio

from aether.core.project.node import project_node
from aether.core.snapshot import ENDPOINT_TYPE, LISTENER_TYPE, Snapshot
from aether.core.state import State
from aether.log import LogLockedError
from aether.plane.admin_client import fetch_admin
from aether.plane.plane import open_plane
from aether.plane.publisher import PublisherStatistics
from aether.rpc.listen import ListenAddress
from aether.testing import make_pod, pod_added

NODE = "node-a"


def _project(state: State, now: int) -> Snapshot:
    return project_node(state, node_name=NODE, now=now)


@attrs.frozen(kw_only=True)
class _Counters:
    seen: int


class _Part:
    def statistics(self) -> _Counters:
        return _Counters(seen=7)


async def test_the_plane_publishes_each_batch_and_serves_it_again_after_a_restart(tmp_path: Path) -> None:
    """A pod sent to the journal shows in the cache's snapshot; reopened, the plane publishes the same snapshot."""
    async with open_plane(tmp_path / "log", project=_project) as plane:
        assert plane.cache.get(NODE) == _project(State(), 0)
        first = plane.cache.get(NODE)
        async with plane.journal.sender() as send:
            await send.send(pod_added(make_pod("web-1", node_name=NODE)))
        with trio.fail_after(5):
            published = await plane.cache.wait_newer(NODE, seen=first)
        assert published == _project(plane.journal.state, plane.journal.last_observed_at)
        assert published.seq == 1
        assert [name for name in published.resources[LISTENER_TYPE] if "web-1" in name] != []
    async with open_plane(tmp_path / "log", project=_project) as reopened:
        assert reopened.cache.get(NODE) == published


async def test_serve_binds_xds_and_the_admin_socket_with_the_role_parts(tmp_path: Path) -> None:
    """`serve` hands back the bound xDS address; `/statistics` holds the journal's, the server's and each part's."""
    admin = tmp_path / "admin.sock"
    async with open_plane(tmp_path / "log", project=_project) as plane, trio.open_nursery() as nursery:
        bound = await nursery.start(
            functools.partial(
                plane.serve,
                xds=ListenAddress.unix(tmp_path / "xds.sock"),
                admin_socket=admin,
                parts={"role": _Part()},
            )
        )
        assert bound == ListenAddress.unix(tmp_path / "xds.sock")
        statistics = await trio.to_thread.run_sync(fetch_admin, admin, "/statistics")
        assert sorted(statistics) == ["journal", "publisher", "role", "xds"]
        assert statistics["role"] == {"seen": 7}
        assert statistics["publisher"] == {"published": 1, "withheld": 0, "last_withheld": []}
        nursery.cancel_scope.cancel()


async def test_an_inconsistent_snapshot_is_withheld_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A projection that drops a cluster's load assignment: the cache keeps the last good snapshot, the log names
    what is missing, the publisher counts it; the next consistent snapshot is published."""
    pod = make_pod("web-1", node_name=NODE, annotations={"config.aether.io/upstreams": "shop/db"})
    broken = {"on": True}

    def project(state: State, now: int) -> Snapshot:
        snapshot = _project(state, now)
        if state.seq == 1 and broken["on"]:
            return snapshot.with_changes(
                seq=snapshot.seq, removed=[(ENDPOINT_TYPE, "db.shop.aether.internal")]
            )
        return snapshot

    async with open_plane(tmp_path / "log", project=project) as plane:
        good = plane.cache.get(NODE)
        folded = trio.Event()
        plane.journal.subscribe(lambda state, now: folded.set() if state.seq >= 1 else None)
        with caplog.at_level(logging.ERROR, logger="aether.plane.publisher"):
            async with plane.journal.sender() as send:
                await send.send(pod_added(pod))
            with trio.fail_after(5):
                await folded.wait()  # subscribers run in subscription order: the publisher has run
        missing = "CDS 'db.shop.aether.internal' needs EDS 'db.shop.aether.internal', which is missing"
        assert plane.cache.get(NODE) is good
        assert plane.publisher.statistics() == PublisherStatistics(
            published=1, withheld=1, last_withheld=(missing,)
        )
        assert [record.getMessage() for record in caplog.records] == [
            f"snapshot of node {NODE!r} at seq 1 not published, Envoy keeps the previous one: {missing}"
            " (an inconsistent projection is a bug)"
        ]
        broken["on"] = False
        plane.publisher(plane.journal.state, plane.journal.last_observed_at)
        assert plane.cache.get(NODE) == _project(plane.journal.state, plane.journal.last_observed_at)
        assert plane.publisher.statistics().published == 2


async def test_a_second_plane_on_a_log_is_refused_naming_the_owner(tmp_path: Path) -> None:
    """One process owns a log: a second `open_plane` on it (an agent or an edge) raises with the owner's pid."""
    async with open_plane(tmp_path / "log", project=_project):
        with pytest.raises(LogLockedError) as refused:
            async with open_plane(tmp_path / "log", project=_project):
                pass  # pragma: no cover - the open fails
    assert (refused.value.directory, refused.value.owner_pid) == (tmp_path / "log", os.getpid())


async def test_a_standby_plane_enters_when_the_owner_leaves_with_all_it_wrote(tmp_path: Path) -> None:
    """A standby waits while the owner runs, follows its log, and enters the moment the owner's block ends, with
    every record the owner wrote folded and the same snapshot published."""
    owner_left = trio.Event()
    entered: list[tuple[bool, int, Snapshot | None]] = []

    async def standby() -> None:
        async with open_plane(tmp_path / "log", project=_project, standby=True) as plane:
            entered.append((owner_left.is_set(), plane.journal.state.seq, plane.cache.get(NODE)))

    async with trio.open_nursery() as nursery:
        async with open_plane(tmp_path / "log", project=_project) as owner:
            async with owner.journal.sender() as send:
                await send.send(pod_added(make_pod("web-1", node_name=NODE)))
                nursery.start_soon(standby)
                await send.send(pod_added(make_pod("web-2", node_name=NODE)))
            with trio.fail_after(5):
                while owner.journal.state.seq < 2:
                    await owner.cache.wait_newer(NODE, seen=owner.cache.get(NODE))
            last = owner.cache.get(NODE)
        owner_left.set()

    assert entered == [(True, 2, last)]
