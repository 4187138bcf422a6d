"""The agent's writer of the pods' UDP service sets: destinations join a set once the proxy ACKed the listeners that
serve them and leave it at once; a failed write is retried with a backoff. The namespace edge is a plain function."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

import trio
import trio.testing

from aether.cni.errors import NetnsProgrammingFailed
from aether.cni.udp_services import RETRY_FIRST, UdpServicesStatistics, serve_udp_services
from aether.core.project import project_node
from aether.core.project.udp import UdpCapture
from aether.core.snapshot import LISTENER_TYPE
from aether.core.state import State
from aether.plane.journal import Journal
from aether.testing import fold_events, make_pod, pod_added, resource_acked
from aether.xds.cache import SnapshotCache

NODE = "node-a"
NETNS = "/run/netns/pod-1"
SERVED = (("10.96.7.9", 5300),)


class _Journal:
    """The part of a journal the writer uses: its state, then every change, pushed to its subscribers."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.subscribers: list[Callable[[State, int], None]] = []

    def subscribe(self, callback: Callable[[State, int], None]) -> None:
        self.subscribers.append(callback)
        callback(self.state, 0)

    def publish(self, state: State) -> None:
        for callback in self.subscribers:
            callback(state, 0)


def _capture(destinations: tuple[tuple[str, int], ...]) -> tuple[UdpCapture, ...]:
    return (UdpCapture(pod="default/web-1", netns=NETNS, container_id="c1", destinations=destinations),)


async def test_destinations_wait_for_the_ack_and_leave_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Before Envoy ACKed the current listeners only removals are written; after it, the wanted set."""
    written: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    wrote = trio.Event()

    def write(netns: Path, destinations: Iterable[tuple[str, int]]) -> None:
        written.append((str(netns), tuple(destinations)))
        trio.from_thread.run_sync(wrote.set)

    state = fold_events(pod_added(make_pod(netns=NETNS, container_id="c1")))
    cache = SnapshotCache()
    cache.set_snapshot(project_node(state, node_name=NODE, now=0))
    version = cache.get(NODE).version(LISTENER_TYPE)  # type: ignore[union-attr]
    captures = [_capture(SERVED)]
    journal = _Journal(state)
    async with trio.open_nursery() as nursery:
        writer = await nursery.start(
            functools.partial(
                serve_udp_services,
                journal=cast(Journal, journal),
                cache=cache,
                node_name=NODE,
                captures=lambda: captures[0],
                write=write,
            )
        )
        assert written == [(NETNS, ())]  # not ACKed yet: nothing diverted to a listener Envoy may not have
        wrote = trio.Event()
        journal.publish(
            fold_events(resource_acked(NODE, type_url=LISTENER_TYPE, version=version), state=state)
        )
        await wrote.wait()
        assert written[-1] == (NETNS, SERVED)
        # The Service is gone from the projection while Envoy has not ACKed the new listeners: removed at once.
        captures[0] = _capture(())
        cache.set_snapshot(
            project_node(
                fold_events(pod_added(make_pod("web-2", ips=("10.0.0.2",))), state=state),
                node_name=NODE,
                now=0,
            )
        )
        wrote = trio.Event()
        journal.publish(state)
        await wrote.wait()
        assert written == [(NETNS, ()), (NETNS, SERVED), (NETNS, ())]

        # The writer records a write once its thread returned, which the mock clock does not wait for: bound the
        # wait in real time.
        give_up = time.monotonic() + 30
        while writer.statistics().pods != 1 and time.monotonic() < give_up:  # noqa: ASYNC110 - a thread, not a task
            await trio.sleep(0.01)
        assert writer.statistics() == UdpServicesStatistics(pods=1, writes=3, failures=0)
        nursery.cancel_scope.cancel()


async def test_a_failed_write_is_retried_with_a_backoff(autojump_clock: trio.testing.MockClock) -> None:
    """`nft` refusing is counted and retried after a backoff, without any state change."""
    attempts: list[tuple[str, int]] = []

    def write(netns: Path, destinations: Iterable[tuple[str, int]]) -> None:
        attempts.extend(destinations)
        attempts.append(("attempt", len(attempts)))
        if len(attempts) == 1:
            raise NetnsProgrammingFailed("nft '-f -' failed with status 1", details="netlink busy")

    async with trio.open_nursery() as nursery:
        writer = await nursery.start(
            functools.partial(
                serve_udp_services,
                journal=cast(Journal, _Journal(fold_events())),
                cache=SnapshotCache(),
                node_name=NODE,
                captures=lambda: _capture(SERVED),
                write=write,
            )
        )
        assert writer.statistics() == UdpServicesStatistics(pods=0, writes=0, failures=1)
        retried = UdpServicesStatistics(pods=1, writes=1, failures=1)
        # The write runs in a worker thread, which the autojump clock does not wait for: poll the outcome in
        # virtual time instead of sleeping once (a sleep of the backoff could end before the retry's thread did).
        give_up = time.monotonic() + 30  # real seconds: a loaded machine may be slow to run the thread
        while writer.statistics() != retried and time.monotonic() < give_up:  # noqa: ASYNC110 - a thread, not a task
            await trio.sleep(RETRY_FIRST / 10)
        assert len(attempts) == 2
        assert writer.statistics() == retried
        nursery.cancel_scope.cancel()
