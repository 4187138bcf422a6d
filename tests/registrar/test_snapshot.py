"""The registry snapshot: versions, the changes of each mutation, the bounded history and resync plans."""

from __future__ import annotations

from aether.core.events.registry import Protocol
from aether.registrar.snapshot import (
    Change,
    ChangeKind,
    Mutation,
    RegistrySnapshot,
    ServiceFilter,
    apply,
    empty_snapshot,
    resync,
    snapshot_of,
)
from tests.registrar._builders import DB, WEB, endpoint, register, unregister


def _apply_all(*mutations: Mutation, history_limit: int = 10_000) -> RegistrySnapshot:
    snapshot = empty_snapshot()
    for mutation in mutations:
        snapshot, _ = apply(snapshot, mutation, history_limit=history_limit)
    return snapshot


def test_first_endpoint_announces_its_service_before_itself() -> None:
    """A service's first endpoint emits SERVICE_ADDED then ENDPOINT_ADDED, both at version 1."""
    snapshot, changes = apply(empty_snapshot(), register("10.0.0.1"))
    assert changes == (
        Change(kind=ChangeKind.SERVICE_ADDED, version=1, service=WEB),
        Change(
            kind=ChangeKind.ENDPOINT_ADDED,
            version=1,
            service=WEB,
            protocol=Protocol.HTTP,
            ip="10.0.0.1",
            endpoint=endpoint("10.0.0.1"),
        ),
    )
    assert (snapshot.version, snapshot.catalog(), snapshot.sorted_endpoints()) == (
        1,
        (WEB,),
        (endpoint("10.0.0.1"),),
    )


def test_second_endpoint_of_a_service_is_only_added() -> None:
    """The catalog already has the service: no SERVICE_ADDED."""
    snapshot = _apply_all(register("10.0.0.1"))
    snapshot, changes = apply(snapshot, register("10.0.0.2"))
    assert [change.kind for change in changes] == [ChangeKind.ENDPOINT_ADDED]
    assert dict(snapshot.services) == {WEB: 2}


def test_reregistering_a_changed_endpoint_updates_it() -> None:
    """Same (service, protocol, ip) with another weight: ENDPOINT_UPDATED at a new version."""
    snapshot = _apply_all(register("10.0.0.1"))
    snapshot, changes = apply(snapshot, register("10.0.0.1", weight=7))
    assert [(change.kind, change.version) for change in changes] == [(ChangeKind.ENDPOINT_UPDATED, 2)]
    assert snapshot.sorted_endpoints() == (endpoint("10.0.0.1", weight=7),)


def test_a_mutation_that_changes_nothing_keeps_the_version() -> None:
    """Re-registering an equal endpoint, or unregistering an unknown ip, returns the same snapshot and no change."""
    snapshot = _apply_all(register("10.0.0.1"))
    assert apply(snapshot, register("10.0.0.1")) == (snapshot, ())
    assert apply(snapshot, unregister("10.9.9.9")) == (snapshot, ())
    assert apply(snapshot, unregister("10.0.0.1", service=DB)) == (snapshot, ())


def test_last_endpoint_removed_takes_the_service_out_of_the_catalog_after_it() -> None:
    """Unregister removes every protocol's endpoint at the ip, then SERVICE_REMOVED."""
    snapshot = _apply_all(register("10.0.0.1"), register("10.0.0.1", protocol=Protocol.TCP))
    snapshot, changes = apply(snapshot, unregister("10.0.0.1"))
    assert changes == (
        Change(
            kind=ChangeKind.ENDPOINT_REMOVED, version=3, service=WEB, protocol=Protocol.HTTP, ip="10.0.0.1"
        ),
        Change(
            kind=ChangeKind.ENDPOINT_REMOVED, version=3, service=WEB, protocol=Protocol.TCP, ip="10.0.0.1"
        ),
        Change(kind=ChangeKind.SERVICE_REMOVED, version=3, service=WEB),
    )
    assert (snapshot.catalog(), len(snapshot.endpoints)) == ((), 0)


def test_resume_from_the_current_version_is_only_snapshot_complete() -> None:
    """Nothing missed: no full snapshot, just the completion at the version."""
    snapshot = _apply_all(register("10.0.0.1"), register("10.0.0.2"))
    assert resync(snapshot, last_version=2) == (Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=2),)


def test_resume_from_an_older_version_in_history_replays_what_was_missed() -> None:
    """The changes after the watcher's version, in order, then SNAPSHOT_COMPLETE."""
    snapshot = _apply_all(register("10.0.0.1"), register("10.0.0.2"), unregister("10.0.0.1"))
    assert [(change.kind, change.ip, change.version) for change in resync(snapshot, last_version=1)] == [
        (ChangeKind.ENDPOINT_ADDED, "10.0.0.2", 2),
        (ChangeKind.ENDPOINT_REMOVED, "10.0.0.1", 3),
        (ChangeKind.SNAPSHOT_COMPLETE, "", 3),
    ]


def test_resume_from_before_history_is_a_full_snapshot() -> None:
    """History keeps 2 changes: a watcher at version 1 of 4 gets the opening marker, catalog, endpoints, completion."""
    snapshot = _apply_all(
        register("10.0.0.1"),
        register("10.0.0.2"),
        register("10.0.0.3"),
        register("10.0.0.4"),
        history_limit=2,
    )
    assert (snapshot.history_floor, snapshot.history_size) == (2, 2)
    plan = resync(snapshot, last_version=1)
    assert [(change.kind, change.ip) for change in plan] == [
        (ChangeKind.FULL_SNAPSHOT, ""),
        (ChangeKind.SERVICE_ADDED, ""),
        (ChangeKind.FULL_SNAPSHOT, "10.0.0.1"),
        (ChangeKind.FULL_SNAPSHOT, "10.0.0.2"),
        (ChangeKind.FULL_SNAPSHOT, "10.0.0.3"),
        (ChangeKind.FULL_SNAPSHOT, "10.0.0.4"),
        (ChangeKind.SNAPSHOT_COMPLETE, ""),
    ]
    assert {change.version for change in plan} == {4}
    assert [change.kind for change in resync(snapshot, last_version=2)] == [
        ChangeKind.ENDPOINT_ADDED,
        ChangeKind.ENDPOINT_ADDED,
        ChangeKind.SNAPSHOT_COMPLETE,
    ]


def test_first_sync_and_a_version_from_the_future_are_full_snapshots() -> None:
    """No version, or one this registry never reached (another store), resyncs in full; even an empty registry."""
    assert resync(empty_snapshot(), last_version=None) == (
        Change(kind=ChangeKind.FULL_SNAPSHOT, version=0),
        Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=0),
    )
    snapshot = _apply_all(register("10.0.0.1"))
    assert resync(snapshot, last_version=9)[0] == Change(kind=ChangeKind.FULL_SNAPSHOT, version=1)


def test_filter_limits_endpoints_but_never_the_catalog() -> None:
    """A watcher of DB sees WEB's SERVICE_ADDED but none of WEB's endpoints, in full and resumed syncs."""
    snapshot = _apply_all(register("10.0.0.1"), register("10.0.1.1", service=DB))
    only_db = ServiceFilter(services=frozenset({DB}))
    full = resync(snapshot, last_version=None, service_filter=only_db)
    assert [(change.kind, change.service, change.ip) for change in full] == [
        (ChangeKind.FULL_SNAPSHOT, "", ""),
        (ChangeKind.SERVICE_ADDED, DB, ""),
        (ChangeKind.SERVICE_ADDED, WEB, ""),
        (ChangeKind.FULL_SNAPSHOT, DB, "10.0.1.1"),
        (ChangeKind.SNAPSHOT_COMPLETE, "", ""),
    ]
    resumed = resync(snapshot, last_version=0, service_filter=only_db)
    assert [(change.kind, change.service) for change in resumed] == [
        (ChangeKind.SERVICE_ADDED, WEB),
        (ChangeKind.SERVICE_ADDED, DB),
        (ChangeKind.ENDPOINT_ADDED, DB),
        (ChangeKind.SNAPSHOT_COMPLETE, ""),
    ]
    nothing = resync(snapshot, last_version=None, service_filter=ServiceFilter(services=frozenset()))
    assert [change.kind for change in nothing].count(ChangeKind.FULL_SNAPSHOT) == 1


def test_snapshot_of_restores_endpoints_without_history() -> None:
    """A checkpoint restored at version 7: same endpoints and catalog; a resume from before 7 resyncs in full."""
    snapshot = snapshot_of([endpoint("10.0.0.2"), endpoint("10.0.0.1", service=DB)], version=7)
    assert (snapshot.version, snapshot.catalog(), snapshot.history_floor) == (7, (DB, WEB), 7)
    assert resync(snapshot, last_version=7) == (Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=7),)
    assert resync(snapshot, last_version=6)[0].kind is ChangeKind.FULL_SNAPSHOT
