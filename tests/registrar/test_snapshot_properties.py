"""Properties of the registry snapshot: any resume plan brings a watcher from its version to the current registry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aether.core.events.registry import Endpoint, EndpointKey, Protocol
from aether.registrar.snapshot import (
    Change,
    ChangeKind,
    EndpointRegistered,
    EndpointsUnregistered,
    Mutation,
    RegistrySnapshot,
    ServiceFilter,
    apply,
    empty_snapshot,
    resync,
)

SERVICES = ["a/one", "a/two", "b/three"]
IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]

_registered = st.builds(
    lambda service, protocol, ip, weight: EndpointRegistered(
        endpoint=Endpoint(service=service, protocol=protocol, ip=ip, weight=weight)
    ),
    st.sampled_from(SERVICES),
    st.sampled_from([Protocol.HTTP, Protocol.TCP]),
    st.sampled_from(IPS),
    st.integers(1, 3),
)
_unregistered = st.builds(
    lambda service, ips: EndpointsUnregistered(service=service, ips=ips),
    st.sampled_from(SERVICES),
    st.lists(st.sampled_from(IPS), min_size=1, max_size=2),
)
MUTATIONS = st.lists(st.one_of(_registered, _unregistered), max_size=25)
FILTERS = st.one_of(st.none(), st.frozensets(st.sampled_from(SERVICES)))

View = tuple[dict[EndpointKey, Endpoint], set[str], int]


def _follow(view: View, changes: tuple[Change, ...]) -> View:
    """A minimal watcher: what the agent's reducer does with the stream, checking the catalog-first rule."""
    endpoints, catalog, version = dict(view[0]), set(view[1]), view[2]
    for change in changes:
        match change.kind:
            case ChangeKind.FULL_SNAPSHOT if change.endpoint is None:
                endpoints, catalog = {}, set()
            case ChangeKind.SERVICE_ADDED:
                catalog.add(change.service)
            case ChangeKind.SERVICE_REMOVED:
                catalog.discard(change.service)
                endpoints = {key: value for key, value in endpoints.items() if key[0] != change.service}
            case ChangeKind.FULL_SNAPSHOT | ChangeKind.ENDPOINT_ADDED | ChangeKind.ENDPOINT_UPDATED:
                assert change.endpoint is not None
                assert change.service in catalog, "an endpoint arrived before its service was announced"
                endpoints[change.endpoint.key] = change.endpoint
            case ChangeKind.ENDPOINT_REMOVED:
                endpoints.pop((change.service, change.protocol, change.ip), None)
            case ChangeKind.SNAPSHOT_COMPLETE:
                version = change.version
    return endpoints, catalog, version


def _expected(snapshot: RegistrySnapshot, wanted: frozenset[str] | None) -> View:
    endpoints = {
        key: value for key, value in snapshot.endpoints.items() if wanted is None or key[0] in wanted
    }
    return endpoints, set(snapshot.services.keys()), snapshot.version


@settings(max_examples=200, deadline=None)
@given(mutations=MUTATIONS, wanted=FILTERS, history_limit=st.integers(1, 8), data=st.data())
def test_a_resync_from_any_version_reaches_the_current_registry(
    mutations: list[Mutation], wanted: frozenset[str] | None, history_limit: int, data: st.DataObject
) -> None:
    """From what the watcher saw at any earlier version (or nothing), the plan gives exactly the current registry."""
    snapshots = [empty_snapshot()]
    for mutation in mutations:
        snapshot, changes = apply(snapshots[-1], mutation, history_limit=history_limit)
        assert (snapshot.version == snapshots[-1].version) == (changes == ())
        assert snapshot.history_size <= max(history_limit, len(changes))
        if changes:
            snapshots.append(snapshot)
    current = snapshots[-1]
    service_filter = ServiceFilter(services=wanted)
    start = data.draw(st.sampled_from([None, *snapshots]))
    seen: View = ({}, set(), -1) if start is None else _expected(start, wanted)
    plan = resync(
        current, last_version=None if start is None else start.version, service_filter=service_filter
    )
    assert plan[-1] == Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=current.version)
    assert _follow(seen, plan) == _expected(current, wanted)
    assert dict(current.services) == {
        service: count
        for service in SERVICES
        if (count := sum(1 for key in current.endpoints if key[0] == service))
    }
