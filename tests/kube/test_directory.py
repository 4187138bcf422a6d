"""Tests of `aether.kube.directory`: a manifest directory as a source of events, polled."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio
import trio.testing

from aether.core.events import Event
from aether.kube.directory import ManifestSource, serve_manifest_directory
from aether.kube.manifests import ManifestDirectory, ManifestError
from aether.kube.offline import fold_offline
from aether.plane.journal import open_journal
from aether.testing.envoy import wait_for
from tests.kube.test_yaml_documents import alias_bomb

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: shop, labels: {aether.io/managed: "true"}}
spec: {serviceAccountName: web}
status: {podIP: 10.0.0.1}
"""
SERVICE = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80}]}
"""


def _kinds(events: list[Event]) -> list[str]:
    return [f"{type(event).__name__} {event.subject}" for event in events]


async def _drain(receive: trio.MemoryReceiveChannel[Event], source: ManifestSource) -> list[Event]:
    """The events sent after the directory's last change (the directory is read in a thread, so the test waits for
    the source's counters, not for its tasks to block)."""
    target = source.statistics().polls + 3  # one poll sees a change, the next finds it still, then it is read

    async def read_again() -> bool:
        return source.statistics().polls >= target

    # Real time: the directory is read in a worker thread, and a virtual clock would jump past the deadline while
    # every task waits on that thread.
    await wait_for(read_again, timeout=20)
    events = []
    while True:
        try:
            events.append(receive.receive_nowait())
        except trio.WouldBlock:
            return events


async def test_the_source_sends_the_directory_then_its_changes_and_the_pods_as_the_registry(
    tmp_path: Path,
) -> None:
    """First reading: the objects and the registry snapshot; a changed Service: only its upsert; a bad file: nothing
    (the last good reading stays); a new pod: its event and a new registry snapshot."""
    (tmp_path / "a.yaml").write_text(f"{POD}---\n{SERVICE}")
    send, receive = trio.open_memory_channel[Event](100)
    async with trio.open_nursery() as nursery:
        source: ManifestSource = await nursery.start(
            functools.partial(
                serve_manifest_directory, tmp_path, send=send, poll_interval=0.02, clock=lambda: 7
            )
        )
        assert _kinds(await _drain(receive, source)) == [
            "PodAdded pod/shop/web-1",
            "KubeServiceUpserted Service/shop/web",
            "EndpointsSnapshotReceived registry",
            "EndpointsSnapshotCompleted registry",
        ]
        assert await _drain(receive, source) == []  # nothing changed, nothing sent

        (tmp_path / "a.yaml").write_text(f"{POD}---\n{SERVICE.replace('80', '81')}")
        assert _kinds(await _drain(receive, source)) == ["KubeServiceUpserted Service/shop/web"]

        (tmp_path / "b.yaml").write_text("kind: [unclosed\n")
        assert await _drain(receive, source) == []
        (tmp_path / "b.yaml").write_text(POD.replace("web-1", "web-2").replace("10.0.0.1", "10.0.0.2"))
        events = await _drain(receive, source)
        assert _kinds(events) == [
            "PodAdded pod/shop/web-2",
            "EndpointsSnapshotReceived registry",
            "EndpointsSnapshotCompleted registry",
        ]
        assert all(event.source == "directory" and event.observed_at == 7 for event in events)
        statistics = source.statistics()
        assert (statistics.events_sent, statistics.objects) == (8, 3)
        assert statistics.failed_readings >= 1
        nursery.cancel_scope.cancel()


async def test_a_first_reading_that_fails_ends_the_source(tmp_path: Path) -> None:
    """Unreadable manifests at start-up are an error, naming the file (there is no good reading to keep)."""
    (tmp_path / "a.yaml").write_text("kind: [unclosed\n")
    send, _ = trio.open_memory_channel[Event](10)
    with pytest.raises(ManifestError, match=r"^manifest a\.yaml document 0: not YAML"):
        await serve_manifest_directory(tmp_path, send=send)


ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: catalog}]
"""


def _changes(source: ManifestSource, at: int) -> list[str]:
    try:
        reading = ManifestDirectory.read(source.directory)
    except ManifestError as exc:
        source.failed(exc)
        return []
    return _kinds(source.changes(reading, observed_at=at))


def test_renames_and_removals_become_deletions_and_a_registrar_fed_source_sends_no_registry(
    tmp_path: Path,
) -> None:
    (tmp_path / "route.yaml").write_text(ROUTE)
    (tmp_path / "pod.yaml").write_text(POD)
    source = ManifestSource(tmp_path, offline_registry=False)
    assert _changes(source, 1) == ["GatewayObjectUpserted HTTPRoute/shop/r", "PodAdded pod/shop/web-1"]
    (tmp_path / "pod.yaml").rename(tmp_path / ".pod.yaml")  # hidden: the pod is deleted
    assert _changes(source, 2) == ["PodRemoved pod/shop/web-1"]
    (tmp_path / ".pod.yaml").rename(tmp_path / "pod.yaml")
    assert _changes(source, 3) == ["PodAdded pod/shop/web-1"]
    (tmp_path / "route.yaml").unlink()
    assert _changes(source, 4) == ["GatewayObjectDeleted HTTPRoute/shop/r"]


def test_a_file_that_is_not_yaml_keeps_the_last_good_objects_and_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "route.yaml").write_text(ROUTE)
    source = ManifestSource(tmp_path)
    _changes(source, 1)
    (tmp_path / "route.yaml").write_text(ROUTE + "---\nspec: [unclosed\n")
    assert _changes(source, 2) == []
    assert source.error is not None
    assert source.error.startswith("manifest route.yaml document 1: not YAML")
    assert source.problems == (source.error,)
    assert list(source.reading.objects) == ["HTTPRoute/shop/r"]
    (tmp_path / "route.yaml").write_text(ROUTE)
    assert _changes(source, 3) == []  # back to the last good text: nothing to send
    assert source.error is None


def test_a_document_that_is_not_an_object_keeps_what_it_defined_before(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    source = ManifestSource(tmp_path, offline_registry=False)
    _changes(source, 1)
    (tmp_path / "pod.yaml").write_text(POD.replace("kind: Pod", "kind: [Pod]"))  # a typo while editing
    assert _changes(source, 2) == []
    assert list(source.reading.objects) == ["Pod/shop/web-1"]
    (problem,) = source.problems
    assert problem.startswith("pod.yaml document 0: ")


async def _run_once(directory: Path, log: Path) -> ManifestSource:
    """Start the source over the journal of `log` (replayed), wait until the journal holds what it sent, stop."""
    async with open_journal(log) as journal, trio.open_nursery() as nursery:
        before = journal.statistics().appended
        source: ManifestSource = await nursery.start(
            functools.partial(
                serve_manifest_directory,
                directory,
                send=journal.sender(),
                poll_interval=60,
                logged=journal.state,
                clock=lambda: 7,
            )
        )

        async def folded() -> bool:
            return journal.statistics().appended - before == source.statistics().events_sent

        await wait_for(folded, timeout=20)
        nursery.cancel_scope.cancel()
    return source


async def test_a_restart_over_the_replayed_log_appends_only_what_changed_while_down(tmp_path: Path) -> None:
    """Restarted with the replayed state as its baseline, an unchanged directory sends nothing (no re-upserts,
    no second registry snapshot); a file deleted while the source was down gets its deletion at the restart."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "a.yaml").write_text(f"{POD}---\n{SERVICE}")
    (manifests / "route.yaml").write_text(ROUTE)
    first = await _run_once(manifests, tmp_path / "log")
    assert (
        first.statistics().events_sent == 5
    )  # pod, service, route, the registry snapshot and its completion
    assert (await _run_once(manifests, tmp_path / "log")).statistics().events_sent == 0
    (manifests / "route.yaml").unlink()
    async with open_journal(tmp_path / "log") as journal:
        source = ManifestSource(manifests, logged=journal.state)
        assert _kinds(source.changes(ManifestDirectory.read(manifests), observed_at=8)) == [
            "GatewayObjectDeleted HTTPRoute/shop/r"
        ]
    await _run_once(manifests, tmp_path / "log")
    async with open_journal(tmp_path / "log") as journal:
        assert list(journal.state.kube.gateway_objects) == []
        assert (
            ManifestSource(manifests, logged=journal.state).changes(
                ManifestDirectory.read(manifests), observed_at=9
            )
            == []
        )


def test_an_object_whose_document_broke_while_down_stays_as_the_log_holds_it(tmp_path: Path) -> None:
    """At start-up, a document that no longer converts (a field of the wrong type) keeps its object: the log's
    copy is not deleted by a typo."""
    (tmp_path / "svc.yaml").write_text(SERVICE)
    logged = fold_offline(
        ManifestDirectory.read(tmp_path).events(source="directory", observed_at=1),
        source="directory",
        observed_at=1,
    )
    (tmp_path / "svc.yaml").write_text(SERVICE.replace("{port: 80}", "{port: eighty}"))
    source = ManifestSource(tmp_path, offline_registry=False, logged=logged)
    assert _changes(source, 2) == []
    (problem,) = source.problems
    assert problem.startswith(
        "svc.yaml document 0: Service/shop/web: not a kubernetes object: spec.ports[].port"
    )


def test_an_alias_bomb_is_a_skipped_document_and_the_source_keeps_serving(tmp_path: Path) -> None:
    """A 1 KB alias bomb dropped into the directory is refused as one document: the objects stay, and the
    problem says why."""
    (tmp_path / "route.yaml").write_text(ROUTE)
    source = ManifestSource(tmp_path, offline_registry=False)
    _changes(source, 1)
    (tmp_path / "bomb.yaml").write_text(alias_bomb())
    assert _changes(source, 2) == []
    assert list(source.reading.objects) == ["HTTPRoute/shop/r"]
    (problem,) = source.problems
    assert problem.startswith(
        "bomb.yaml document 0: refused: line 1: aliases expand the document from 38 to "
    )
