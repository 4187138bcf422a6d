"""Tests of `aether.kube.watch`: the reflector against the test API server, through restarts, 410s and cut
connections; a consumer folding its updates always ends equal to the server's store, with nothing sent twice."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.resources import NODES, PODS, object_key, resource_version_of
from aether.kube.watch import (
    Deleted,
    Reflector,
    Resumed,
    Synced,
    Update,
    Upserted,
    WatchInterrupted,
    WatchQuery,
    serve_reflector,
)
from aether.rpc.backoff import Backoff
from aether.testing.kubeapi import KubeApi, open_kube_api

FAST = Backoff(base=0.01, cap=0.05)


def pod(name: str, *, generation: int = 0, managed: bool = True) -> Any:
    labels = {"aether.io/managed": "true"} if managed else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": labels,
            "annotations": {"g": str(generation)},
        },
        "spec": {"nodeName": "node-1"},
    }


@attrs.define
class Mirror:
    """What a consumer of the updates holds, and every update it got."""

    receive: trio.MemoryReceiveChannel[Update]
    objects: dict[str, Any] = attrs.field(factory=dict)
    updates: list[Update] = attrs.field(factory=list)

    async def until(self, done: Callable[[Mirror], bool]) -> None:
        with trio.fail_after(10):
            while not done(self):
                update = await self.receive.receive()
                self.updates.append(update)
                match update:
                    case Synced(objects=objects):
                        self.objects = {object_key(obj): obj for obj in objects}
                    case Upserted(object=obj):
                        self.objects[object_key(obj)] = obj
                    case Deleted(object=obj):
                        del self.objects[object_key(obj)]

    def kinds(self) -> list[str]:
        return [type(update).__name__ for update in self.updates]

    def versions_of_changes(self) -> list[int]:
        return [int(u.resource_version) for u in self.updates if isinstance(u, Upserted | Deleted)]


def stored(api: KubeApi, *, selector: Callable[[Any], bool] = lambda obj: True) -> dict[str, Any]:
    objects = api.store.objects_at(("", "pods"), revision=api.store.revision)
    return {key: obj for key, obj in objects.items() if selector(obj)}


def same_as_store(api: KubeApi) -> Callable[[Mirror], bool]:
    def check(mirror: Mirror) -> bool:
        want = stored(api)
        return {k: resource_version_of(v) for k, v in mirror.objects.items()} == {
            k: resource_version_of(v) for k, v in want.items()
        }

    return check


@pytest.fixture
async def api() -> AsyncIterator[KubeApi]:
    async with open_kube_api() as server:
        yield server


async def start(
    nursery: trio.Nursery, api: KubeApi, query: WatchQuery | None = None, **options: Any
) -> tuple[Reflector, Mirror]:
    query = query or WatchQuery(resource=PODS)
    send, receive = trio.open_memory_channel[Update](0)
    client = KubeClient(ClusterConfig.from_url(api.url))
    reflector: Reflector = await nursery.start(
        lambda task_status: serve_reflector(
            client, query, send, backoff=FAST, rng=random.Random(7), task_status=task_status, **options
        )
    )
    return reflector, Mirror(receive)


async def test_first_list_then_changes_in_order(api: KubeApi) -> None:
    """The first update is the whole (paged) list, sorted; then each change once, in version order."""
    for name in ("c", "a", "b"):
        api.store.create(PODS, pod(name))
    async with trio.open_nursery() as nursery:
        reflector, mirror = await start(nursery, api, page_size=2)
        await mirror.until(lambda m: len(m.updates) == 1)
        first = mirror.updates[0]
        assert isinstance(first, Synced)
        assert ([object_key(obj) for obj in first.objects], first.resource_version) == (
            ["shop/a", "shop/b", "shop/c"],
            "4",
        )
        api.store.update(PODS, pod("a", generation=1))
        api.store.delete(PODS, name="b", namespace="shop")
        api.store.create(PODS, pod("d"))
        await mirror.until(same_as_store(api))
        assert mirror.kinds() == ["Synced", "Upserted", "Deleted", "Upserted"]
        assert mirror.versions_of_changes() == [5, 6, 7]
        await trio.testing.wait_all_tasks_blocked()
        assert reflector.statistics().resource_version == "7"
        nursery.cancel_scope.cancel()


async def test_dropped_connections_lose_and_repeat_nothing(api: KubeApi) -> None:
    """Watches cut again and again while objects change: the consumer ends equal to the store, no version twice."""
    async with trio.open_nursery() as nursery:
        reflector, mirror = await start(nursery, api)
        await mirror.until(lambda m: len(m.updates) == 1)
        for round_number in range(20):
            api.store.put(PODS, pod(f"p{round_number % 7}", generation=round_number))
            if round_number % 3 == 0:
                api.store.delete(PODS, name=f"p{round_number % 7}", namespace="shop")
            api.drop_watches()
            await mirror.until(
                lambda m, n=round_number: any(
                    isinstance(u, Upserted | Deleted) and int(u.resource_version) == api.store.revision
                    for u in m.updates
                )
            )
        await mirror.until(same_as_store(api))
        versions = mirror.versions_of_changes()
        assert versions == sorted(set(versions))
        assert len(versions) == api.store.revision - 1
        assert "Synced" not in mirror.kinds()[1:]
        assert reflector.statistics().watches > 10
        nursery.cancel_scope.cancel()


async def test_compaction_while_away_relists_and_drops_the_vanished(api: KubeApi) -> None:
    """A watch that resumes after its version was compacted gets 410, lists again, and sends the whole set."""
    for name in ("a", "b"):
        api.store.create(PODS, pod(name))
    async with trio.open_nursery() as nursery:
        reflector, mirror = await start(nursery, api)
        await mirror.until(lambda m: len(m.updates) == 1)
        await api.stop()
        api.store.delete(PODS, name="a", namespace="shop")
        api.store.create(PODS, pod("c"))
        await api.restart(nursery=nursery)  # compacts: the reflector's version is gone
        await mirror.until(lambda m: isinstance(m.updates[-1], Synced) and len(m.updates) > 1)
        assert sorted(mirror.objects) == ["shop/b", "shop/c"]
        # The restarted server answers the watch (Resumed), then says 410 in its first event: list again.
        assert mirror.kinds() == ["Synced", "WatchInterrupted", "Resumed", "Synced"]
        assert reflector.statistics().expired == 1
        nursery.cancel_scope.cancel()


async def test_forced_410_on_a_live_watch_relists(api: KubeApi) -> None:
    """A compaction that overtakes a cut watch: the next watch gets 410 and the reflector relists once."""
    api.store.create(PODS, pod("a"))
    async with trio.open_nursery() as nursery:
        reflector, mirror = await start(nursery, api)
        await mirror.until(lambda m: len(m.updates) == 1)
        await api.stop()
        api.store.create(PODS, pod("b"))
        api.compact()
        await api.restart(nursery=nursery, keep_history=True)
        await mirror.until(same_as_store(api))
        assert [k for k in mirror.kinds() if k in ("Synced", "Upserted", "Deleted")] == ["Synced", "Synced"]
        assert reflector.statistics().lists == 2
        nursery.cancel_scope.cancel()


async def test_restart_with_history_resumes_without_relisting(api: KubeApi) -> None:
    """An API server restart that keeps history: the reflector re-watches from its version and gets what it missed."""
    api.store.create(PODS, pod("a"))
    async with trio.open_nursery() as nursery:
        reflector, mirror = await start(nursery, api)
        await mirror.until(lambda m: len(m.updates) == 1)
        await api.stop()
        api.store.create(PODS, pod("b"))
        api.store.update(PODS, pod("a", generation=2))
        await api.restart(nursery=nursery, keep_history=True)
        await mirror.until(same_as_store(api))
        assert mirror.kinds() == ["Synced", "WatchInterrupted", "Resumed", "Upserted", "Upserted"]
        assert (reflector.statistics().lists, mirror.versions_of_changes()) == (1, [3, 4])
        nursery.cancel_scope.cancel()


async def test_bookmarks_advance_the_version(api: KubeApi) -> None:
    """A bookmark moves the resume point past changes of other kinds, so a later re-watch starts there."""
    api.store.create(PODS, pod("a"))
    async with trio.open_nursery() as nursery:
        reflector, mirror = await start(nursery, api)
        await mirror.until(lambda m: len(m.updates) == 1)
        for index in range(3):
            api.store.create(NODES, {"metadata": {"name": f"node-{index}"}})
        with trio.fail_after(5):
            await api.wait_watches()
        api.send_bookmarks()
        await trio.testing.wait_all_tasks_blocked()
        assert reflector.statistics().bookmarks == 1
        assert reflector.statistics().resource_version == "5"
        nursery.cancel_scope.cancel()


async def test_selector_changes_arrive_as_upserts_and_deletes(api: KubeApi) -> None:
    """With a label selector, an object leaving the selection is Deleted for the consumer, and one entering Upserted."""
    api.store.create(PODS, pod("a"))
    api.store.create(PODS, pod("b", managed=False))
    async with trio.open_nursery() as nursery:
        _, mirror = await start(
            nursery, api, WatchQuery(resource=PODS, label_selector="aether.io/managed=true")
        )
        await mirror.until(lambda m: len(m.updates) == 1)
        api.store.update(PODS, pod("a", managed=False))
        api.store.update(PODS, pod("b"))
        await mirror.until(lambda m: sorted(m.objects) == ["shop/b"])
        assert mirror.kinds() == ["Synced", "Deleted", "Upserted"]
        nursery.cancel_scope.cancel()


async def test_server_timeouts_rewatch_without_gaps(api: KubeApi) -> None:
    """Watches the server ends (timeoutSeconds) are re-opened from the last version at once."""
    async with trio.open_nursery() as nursery:
        reflector, mirror = await start(nursery, api, watch_timeout=(1.0, 1.0))
        await mirror.until(lambda m: len(m.updates) == 1)
        with trio.fail_after(5):
            await api.wait_watches(started=2)
        api.store.create(PODS, pod("a"))
        await mirror.until(same_as_store(api))
        assert (reflector.statistics().failures, mirror.kinds()) == (0, ["Synced", "Upserted"])
        nursery.cancel_scope.cancel()


async def test_unreachable_server_is_retried_until_it_answers() -> None:
    """A reflector started before the API is up reports the outage once and syncs when it answers."""
    async with open_kube_api() as api, trio.open_nursery() as nursery:
        api.store.create(PODS, pod("a"))
        await api.stop()
        send, receive = trio.open_memory_channel[Update](0)
        client = KubeClient(ClusterConfig.from_url(api.url))
        reflector = Reflector(client, WatchQuery(resource=PODS), backoff=FAST, rng=random.Random(1))
        nursery.start_soon(reflector.run, send)
        mirror = Mirror(receive)
        await mirror.until(lambda m: len(m.updates) == 1)
        assert isinstance(mirror.updates[0], WatchInterrupted)
        await api.restart(nursery=nursery)
        await mirror.until(same_as_store(api))
        assert mirror.kinds() == ["WatchInterrupted", "Synced"]
        await mirror.until(lambda m: isinstance(m.updates[-1], Resumed))
        assert reflector.statistics().failures >= 1
        nursery.cancel_scope.cancel()


async def test_throttling_and_server_errors_are_retried(api: KubeApi) -> None:
    """429 and 500 answers to the list and the watch: the reflector backs off, retries, and syncs once."""
    api.store.create(PODS, pod("a"))
    api.fail_next(2, code=429)
    api.fail_next(1, code=500)
    async with trio.open_nursery() as nursery:
        send, receive = trio.open_memory_channel[Update](0)
        reflector = Reflector(
            KubeClient(ClusterConfig.from_url(api.url)),
            WatchQuery(resource=PODS),
            backoff=FAST,
            rng=random.Random(2),
        )
        nursery.start_soon(reflector.run, send)
        mirror = Mirror(receive)
        await mirror.until(same_as_store(api))
        api.fail_next(1, code=500)
        api.drop_watches()
        api.store.create(PODS, pod("b"))
        await mirror.until(same_as_store(api))
        assert [k for k in mirror.kinds() if k in ("Synced", "Upserted", "Deleted")] == ["Synced", "Upserted"]
        assert (reflector.statistics().failures, reflector.statistics().lists) == (4, 1)
        nursery.cancel_scope.cancel()


async def test_random_churn_with_cuts_compactions_and_restarts_converges(api: KubeApi) -> None:
    """Seeded random writes, cut watches, compactions and restarts: between two Synced the versions only grow,
    and the consumer always ends equal to the store."""
    rng = random.Random(11)
    async with trio.open_nursery() as nursery:
        _, mirror = await start(nursery, api, page_size=3)
        await mirror.until(lambda m: len(m.updates) == 1)
        for _ in range(60):
            name = f"p{rng.randrange(8)}"
            action = rng.random()
            if action < 0.5:
                api.store.put(PODS, pod(name, generation=rng.randrange(1000), managed=rng.random() < 0.8))
            elif action < 0.7 and api.store.get(PODS, name=name, namespace="shop") is not None:
                api.store.delete(PODS, name=name, namespace="shop")
            elif action < 0.8:
                api.drop_watches()
            elif action < 0.9:
                api.compact()
                api.drop_watches()
            else:
                await api.stop()
                api.store.put(PODS, pod(name, generation=rng.randrange(1000)))
                await api.restart(nursery=nursery, keep_history=rng.random() < 0.5)
            if rng.random() < 0.3:
                await mirror.until(same_as_store(api))
        await mirror.until(same_as_store(api))
        since_sync: list[int] = []
        for update in mirror.updates:
            if isinstance(update, Synced):
                since_sync = []
            elif isinstance(update, Upserted | Deleted):
                since_sync.append(int(update.resource_version))
                assert since_sync == sorted(set(since_sync))
        nursery.cancel_scope.cancel()
