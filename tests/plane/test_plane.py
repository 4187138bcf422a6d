"""`open_plane` publishes the role's projection of every batch, replays it after a restart, and `Plane.serve` serves
xDS and the admin documents with the role's parts' counters."""

from __future__ import annotations

import functools
from pathlib import Path

import attrs
import trio

from aether.core.project.node import project_node
from aether.core.snapshot import LISTENER_TYPE, Snapshot
from aether.core.state import State
from aether.plane.admin_client import fetch_admin
from aether.plane.plane import open_plane
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
        assert sorted(statistics) == ["journal", "role", "xds"]
        assert statistics["role"] == {"seen": 7}
        nursery.cancel_scope.cancel()
