"""The registry snapshot: versions, the changes of each mutation, the bounded history and resync plans."""

from __future__ import annotations

import pytest

from aether.core.events.registry import Protocol
from aether.registrar.snapshot import (
    Change,
    ChangeKind,
    EndpointsReplaced,
    EndpointsUpdated,
    Mutation,
    RegistrySnapshot,
    ServiceFilter,
    apply,
    apply_update,
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


def test_a_relist_changes_only_what_differs_at_the_stores_version() -> None:
    """EndpointsReplaced: removals (closing a service) first, then additions and updates, all at its version."""
    snapshot = _apply_all(register("10.0.0.1"), register("10.0.0.2"), register("10.0.1.1", service=DB))
    replaced = EndpointsReplaced(endpoints=(endpoint("10.0.0.2", weight=7), endpoint("10.0.0.3")), version=90)
    snapshot, changes = apply_update(snapshot, replaced)
    assert [(change.kind, change.service, change.ip, change.version) for change in changes] == [
        (ChangeKind.ENDPOINT_REMOVED, DB, "10.0.1.1", 90),
        (ChangeKind.SERVICE_REMOVED, DB, "", 90),
        (ChangeKind.ENDPOINT_REMOVED, WEB, "10.0.0.1", 90),
        (ChangeKind.ENDPOINT_UPDATED, WEB, "10.0.0.2", 90),
        (ChangeKind.ENDPOINT_ADDED, WEB, "10.0.0.3", 90),
    ]
    assert (snapshot.version, snapshot.catalog(), dict(snapshot.services)) == (90, (WEB,), {WEB: 2})


def test_a_store_update_that_changes_nothing_still_moves_to_the_stores_version() -> None:
    """An etcd put of an equal value makes a revision: the version moves (waiters are released), no changes."""
    snapshot = _apply_all(register("10.0.0.1"))
    moved, changes = apply_update(snapshot, EndpointsUpdated(upserted=(endpoint("10.0.0.1"),), version=7))
    assert (moved.version, changes, moved.endpoints) == (7, (), snapshot.endpoints)
    same, changes = apply_update(snapshot, EndpointsUpdated(removed=((DB, Protocol.HTTP, "10.9.9.9"),)))
    assert (same, changes) == (snapshot, ())


def test_an_update_without_a_version_takes_the_next_one() -> None:
    """The registrar numbers versions for stores that do not (an upsert and a removal in one version)."""
    snapshot = _apply_all(register("10.0.0.1"))
    update = EndpointsUpdated(upserted=(endpoint("10.0.0.2"),), removed=((WEB, Protocol.HTTP, "10.0.0.1"),))
    snapshot, changes = apply_update(snapshot, update)
    assert [(change.kind, change.ip, change.version) for change in changes] == [
        (ChangeKind.ENDPOINT_REMOVED, "10.0.0.1", 2),
        (ChangeKind.SERVICE_REMOVED, "", 2),
        (ChangeKind.SERVICE_ADDED, "", 2),
        (ChangeKind.ENDPOINT_ADDED, "10.0.0.2", 2),
    ]


def test_a_store_version_that_does_not_move_forward_is_refused() -> None:
    """A version at or below the snapshot's is a backend bug."""
    snapshot = _apply_all(register("10.0.0.1"))
    with pytest.raises(ValueError, match=r"^store update: version must be greater than 1 \(got 1\)$"):
        apply_update(snapshot, EndpointsUpdated(version=1))


def test_resume_across_skipped_store_versions_and_eviction_past_gaps() -> None:
    """History keeps only versions with changes; a resume over gaps gets exactly the missed changes, and eviction
    steps over gaps."""
    snapshot = empty_snapshot()
    for version, ip in ((10, "10.0.0.1"), (20, "10.0.0.2"), (30, "10.0.0.3")):
        snapshot, _ = apply_update(
            snapshot, EndpointsUpdated(upserted=(endpoint(ip),), version=version), history_limit=3
        )
    assert (sorted(snapshot.history.keys()), snapshot.history_floor, snapshot.history_size) == (
        [20, 30],
        10,
        2,
    )
    assert [(change.kind, change.ip) for change in resync(snapshot, last_version=15)] == [
        (ChangeKind.ENDPOINT_ADDED, "10.0.0.2"),
        (ChangeKind.ENDPOINT_ADDED, "10.0.0.3"),
        (ChangeKind.SNAPSHOT_COMPLETE, ""),
    ]
    assert resync(snapshot, last_version=9)[0].kind is ChangeKind.FULL_SNAPSHOT
