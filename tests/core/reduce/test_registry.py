"""Tests of `aether.core.reduce.registry`: the registrar's snapshot, endpoint and catalog events."""

from __future__ import annotations

import immutables
import pytest

from aether.core.events import Endpoint, Event, Protocol
from aether.core.state import Diagnostics, RegistryState, Rejection, RejectionReason, State
from aether.core.state.registry import ServiceEndpoints
from aether.testing import (
    domain_of,
    endpoint_added,
    endpoint_removed,
    endpoint_updated,
    endpoints_snapshot_completed,
    endpoints_snapshot_received,
    fold_events,
    make_endpoint,
    registry_service_added,
    registry_service_removed,
)

WEB_1 = make_endpoint("10.0.0.1")
WEB_2 = make_endpoint("10.0.0.2")
DB = make_endpoint("10.0.1.1", service="shop/db", protocol=Protocol.TCP, port=5432)


def _endpoints(items: dict[tuple[Protocol, str], Endpoint]) -> ServiceEndpoints:
    endpoints: ServiceEndpoints = immutables.Map(items)
    return endpoints


def _registry(
    *endpoints: Endpoint, version: str, synced: bool = False, services: tuple[str, ...] = ()
) -> RegistryState:
    grouped: dict[str, dict[tuple[Protocol, str], Endpoint]] = {}
    for endpoint in endpoints:
        grouped.setdefault(endpoint.service, {})[(endpoint.protocol, endpoint.ip)] = endpoint
    catalog = set(services) | set(grouped)
    return RegistryState(
        version=version,
        synced=synced,
        services=immutables.Map((service, True) for service in catalog),
        endpoints=immutables.Map((service, _endpoints(items)) for service, items in grouped.items()),
    )


def _synced() -> State:
    """The registry after a full sync at version 5: web (two endpoints) and db (one)."""
    return fold_events(
        endpoints_snapshot_received(WEB_1, WEB_2, DB, version="5"), endpoints_snapshot_completed("5")
    )


def _rejected(
    subject: str, reason: RejectionReason, message: str, *, seq: int, total: int = 1
) -> Diagnostics:
    rejection = Rejection(subject=subject, reason=reason, message=message, seq=seq)
    return Diagnostics(rejections=immutables.Map({subject: rejection}), rejected_total=total)


# --- snapshots ---


def test_a_snapshot_replaces_the_registry_view_until_completed() -> None:
    """A snapshot sets catalog, endpoints and version, unsynced; its completion marks the view synced."""
    received = fold_events(
        endpoints_snapshot_received(
            WEB_1, WEB_2, DB, version="5", services=("default/web", "shop/db", "shop/cart")
        )
    )
    expected = _registry(WEB_1, WEB_2, DB, version="5", services=("shop/cart",))
    assert received == State(seq=1, registry=expected)
    completed = fold_events(endpoints_snapshot_completed("5"), state=received)
    assert completed == State(
        seq=2, registry=_registry(WEB_1, WEB_2, DB, version="5", synced=True, services=("shop/cart",))
    )


def test_a_new_snapshot_drops_what_it_lacks_and_unsyncs() -> None:
    """A resync forgets endpoints and services the new snapshot does not hold."""
    state = fold_events(endpoints_snapshot_received(WEB_2, version="9"), state=_synced())
    assert state == State(seq=3, registry=_registry(WEB_2, version="9"))


def test_a_snapshot_leaves_out_bad_endpoints_and_rejects_them() -> None:
    """Invalid endpoints and endpoints of services outside the catalog are left out; the rest applies."""
    bad_ip = make_endpoint("10.0.0.300")
    uncatalogued = make_endpoint("10.0.2.1", service="shop/cart")
    event = endpoints_snapshot_received(WEB_1, bad_ip, uncatalogued, version="3", services=("default/web",))
    state = fold_events(event)
    assert domain_of(state) == State(registry=_registry(WEB_1, version="3"))
    assert state.diagnostics == _rejected(
        "registry",
        RejectionReason.INVALID_ENDPOINT,
        "2 entries of snapshot '3' left out:"
        " endpoint default/web/10.0.0.300: ip must be an IP address (got '10.0.0.300');"
        " endpoint shop/cart/10.0.2.1: service 'shop/cart' is not in the catalog",
        seq=1,
    )


def test_a_later_clean_snapshot_lifts_the_rejection_of_a_snapshot() -> None:
    """The registry's rejection goes once a later registry-wide event applies."""
    state = fold_events(
        endpoints_snapshot_received(WEB_1, make_endpoint("x"), version="3"), endpoints_snapshot_completed("3")
    )
    assert state == State(
        seq=2, registry=_registry(WEB_1, version="3", synced=True), diagnostics=Diagnostics(rejected_total=1)
    )


@pytest.mark.parametrize(
    ("event", "subject"),
    [
        (endpoints_snapshot_completed("4"), "registry"),
        (endpoint_added(WEB_1, version="4"), "endpoint/default/web/http/10.0.0.1"),
        (endpoint_updated(WEB_1, version="4"), "endpoint/default/web/http/10.0.0.1"),
        (endpoint_removed(WEB_1, version="4"), "endpoint/default/web/http/10.0.0.1"),
        (registry_service_added("shop/cart", version="4"), "service/shop/cart"),
        (registry_service_removed("shop/db", version="4"), "service/shop/db"),
    ],
    ids=["completed", "added", "updated", "removed", "service-added", "service-removed"],
)
def test_every_registry_event_older_than_the_applied_version_is_stale(event: Event, subject: str) -> None:
    """An event at a version below the applied one is rejected as stale and changes nothing."""
    before = _synced()
    state = fold_events(event, state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        subject, RejectionReason.STALE_VERSION, "registry version '4' is older than the applied '5'", seq=3
    )


def test_a_snapshot_below_the_applied_version_resets_the_counter() -> None:
    """A restarted registrar counts from a lower version: its snapshot replaces the view and later events apply."""
    state = fold_events(
        endpoints_snapshot_received(WEB_1, version="4"), endpoint_added(WEB_2, version="5"), state=_synced()
    )
    assert state.diagnostics == Diagnostics()
    assert domain_of(state) == State(registry=_registry(WEB_1, WEB_2, version="5"))


@pytest.mark.parametrize("version", ["", "v7", "-1", "1.5", " 7", "²", "٣"])
def test_a_version_that_is_no_decimal_counter_is_invalid(version: str) -> None:
    """A registry version must be ASCII decimal digits; anything else is rejected and changes nothing."""
    before = _synced()
    state = fold_events(endpoints_snapshot_completed(version), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        "registry",
        RejectionReason.INVALID_VERSION,
        f"registry version must be a decimal counter (got {version!r})",
        seq=3,
    )


def test_versions_compare_as_numbers() -> None:
    """Version '10' is newer than '9', and '007' is the same version as '7'."""
    state = fold_events(endpoints_snapshot_completed("9"), endpoints_snapshot_completed("10"))
    assert (state.registry.version, state.diagnostics) == ("10", Diagnostics())
    state = fold_events(endpoints_snapshot_completed("7"), endpoints_snapshot_completed("007"))
    assert (state.registry.version, state.diagnostics) == ("007", Diagnostics())


# --- endpoints ---


def test_an_endpoint_of_a_catalogued_service_is_added() -> None:
    """An endpoint of a service in the catalog is stored under its service and `(protocol, ip)`."""
    extra = make_endpoint("10.0.0.3", weight=10)
    state = fold_events(endpoint_added(extra, version="6"), state=_synced())
    assert state == State(seq=3, registry=_registry(WEB_1, WEB_2, DB, extra, version="6", synced=True))


def test_an_endpoint_update_replaces_the_endpoint() -> None:
    """An update of a known endpoint replaces it."""
    drained = make_endpoint("10.0.0.1", weight=1)
    state = fold_events(endpoint_updated(drained, version="6"), state=_synced())
    assert state == State(seq=3, registry=_registry(drained, WEB_2, DB, version="6", synced=True))


def test_the_same_ip_with_another_protocol_is_another_endpoint() -> None:
    """Endpoints are keyed by protocol and IP: a TCP endpoint beside an HTTP one on the same IP adds one."""
    tcp = make_endpoint("10.0.0.1", protocol=Protocol.TCP)
    state = fold_events(endpoint_added(tcp, version="5"), state=_synced())
    assert state.registry == _registry(WEB_1, WEB_2, DB, tcp, version="5", synced=True)


def test_an_endpoint_of_a_service_outside_the_catalog_is_rejected() -> None:
    """An endpoint whose service is not in the catalog is rejected; nothing changes."""
    before = _synced()
    state = fold_events(
        endpoint_added(make_endpoint("10.0.2.1", service="shop/cart"), version="6"), state=before
    )
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        "endpoint/shop/cart/http/10.0.2.1",
        RejectionReason.UNKNOWN_SERVICE,
        "endpoint shop/cart/10.0.2.1: service 'shop/cart' is not in the catalog",
        seq=3,
    )


@pytest.mark.parametrize(
    ("endpoint", "subject", "message"),
    [
        (
            make_endpoint(service="web"),
            "endpoint/web/http/10.0.0.1",
            "endpoint web/10.0.0.1: service key must be '<namespace>/<serviceAccount>' (got 'web')",
        ),
        (
            make_endpoint("10.0.0.256"),
            "endpoint/default/web/http/10.0.0.256",
            "endpoint default/web/10.0.0.256: ip must be an IP address (got '10.0.0.256')",
        ),
        (
            make_endpoint(port=0),
            "endpoint/default/web/http/10.0.0.1",
            "endpoint default/web/10.0.0.1: port must be 1..65535 (got 0)",
        ),
        (
            make_endpoint(ports=(9090, 70000)),
            "endpoint/default/web/http/10.0.0.1",
            "endpoint default/web/10.0.0.1: ports must be 1..65535 (got 70000)",
        ),
        (
            make_endpoint(weight=0),
            "endpoint/default/web/http/10.0.0.1",
            "endpoint default/web/10.0.0.1: weight must be at least 1 (got 0)",
        ),
    ],
    ids=["service", "ip", "port", "ports", "weight"],
)
def test_an_invalid_endpoint_is_rejected(endpoint: Endpoint, subject: str, message: str) -> None:
    """An endpoint with a bad service key, IP, port or weight is rejected; nothing changes."""
    before = _synced()
    state = fold_events(endpoint_added(endpoint, version="6"), state=before)
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(subject, RejectionReason.INVALID_ENDPOINT, message, seq=3)


def test_a_later_valid_endpoint_lifts_its_rejection() -> None:
    """After an invalid delivery, a valid one for the same endpoint applies and lifts the rejection."""
    state = fold_events(
        endpoint_added(make_endpoint("10.0.0.1", port=0), version="6"),
        endpoint_updated(make_endpoint("10.0.0.1", port=9000), version="7"),
        state=_synced(),
    )
    expected = _registry(make_endpoint("10.0.0.1", port=9000), WEB_2, DB, version="7", synced=True)
    assert state == State(seq=4, registry=expected, diagnostics=Diagnostics(rejected_total=1))


def test_an_endpoint_is_removed() -> None:
    """Removing a known endpoint forgets it and moves the version."""
    state = fold_events(endpoint_removed(WEB_1, version="6"), state=_synced())
    assert state == State(seq=3, registry=_registry(WEB_2, DB, version="6", synced=True))


def test_removing_the_last_endpoint_of_a_service_keeps_the_service() -> None:
    """A service whose last endpoint goes stays in the catalog, with no (empty) endpoint map."""
    state = fold_events(endpoint_removed(DB, version="6"), state=_synced())
    assert state.registry == _registry(WEB_1, WEB_2, version="6", synced=True, services=("shop/db",))
    assert "shop/db" not in state.registry.endpoints


def test_removing_an_unknown_endpoint_is_rejected() -> None:
    """Removing an endpoint the view does not hold (another protocol here) is rejected; nothing changes."""
    before = _synced()
    state = fold_events(
        endpoint_removed(make_endpoint("10.0.0.1", protocol=Protocol.TCP), version="6"), state=before
    )
    assert domain_of(state) == domain_of(before)
    assert state.diagnostics == _rejected(
        "endpoint/default/web/tcp/10.0.0.1",
        RejectionReason.UNKNOWN_ENDPOINT,
        "endpoint default/web/10.0.0.1 (tcp) removed but not known",
        seq=3,
    )


def test_a_removal_lifts_the_rejection_of_the_endpoint() -> None:
    """A rejected delivery, then the endpoint's removal: the removal applies and lifts the rejection."""
    state = fold_events(
        endpoint_updated(make_endpoint("10.0.0.1", weight=0), version="6"),
        endpoint_removed(WEB_1, version="6"),
        state=_synced(),
    )
    assert state == State(
        seq=4,
        registry=_registry(WEB_2, DB, version="6", synced=True),
        diagnostics=Diagnostics(rejected_total=1),
    )


# --- catalog ---


def test_a_service_is_added_to_the_catalog() -> None:
    """A service enters the catalog without endpoints."""
    state = fold_events(registry_service_added("shop/cart", version="1"))
    assert state == State(seq=1, registry=_registry(version="1", services=("shop/cart",)))


def test_an_invalid_service_key_is_rejected() -> None:
    """A service key that is not `<namespace>/<serviceAccount>` is rejected; nothing changes."""
    state = fold_events(registry_service_added("cart", version="1"))
    assert domain_of(state) == State()
    assert state.diagnostics == _rejected(
        "service/cart",
        RejectionReason.INVALID_SERVICE,
        "service key must be '<namespace>/<serviceAccount>' (got 'cart')",
        seq=1,
    )


def test_removing_a_service_removes_its_endpoints() -> None:
    """A service that leaves the catalog takes its endpoints with it."""
    state = fold_events(registry_service_removed("default/web", version="6"), state=_synced())
    assert state == State(seq=3, registry=_registry(DB, version="6", synced=True))


def test_removing_a_service_without_endpoints_keeps_the_others() -> None:
    """Removing an endpoint-less service only shrinks the catalog."""
    state = fold_events(
        registry_service_added("shop/cart", version="6"),
        registry_service_removed("shop/cart", version="7"),
        state=_synced(),
    )
    assert state == State(seq=4, registry=_registry(WEB_1, WEB_2, DB, version="7", synced=True))


def test_removing_a_service_outside_the_catalog_is_rejected_then_lifted() -> None:
    """Removing an unknown service is rejected; once it is added, its removal applies and lifts the rejection."""
    rejected = fold_events(registry_service_removed("shop/cart", version="1"))
    assert domain_of(rejected) == State()
    assert rejected.diagnostics == _rejected(
        "service/shop/cart",
        RejectionReason.UNKNOWN_SERVICE,
        "service 'shop/cart' removed but not in the catalog",
        seq=1,
    )
    state = fold_events(
        registry_service_added("shop/cart", version="2"),
        registry_service_removed("shop/cart", version="3"),
        state=rejected,
    )
    assert state == State(seq=3, registry=_registry(version="3"), diagnostics=Diagnostics(rejected_total=1))


def test_registry_helpers_count_and_look_up_endpoints() -> None:
    """`endpoints_of` gives a service's endpoints (empty when none) and `endpoint_count` counts them all."""
    registry = _synced().registry
    assert registry.endpoint_count() == 3
    assert registry.endpoints_of("shop/db") == _endpoints({(Protocol.TCP, "10.0.1.1"): DB})
    assert registry.endpoints_of("shop/cart") == immutables.Map()


def test_a_snapshot_leaves_malformed_catalog_entries_out() -> None:
    """Catalog names that are no `<ns>/<sa>` key are left out of the catalog and reported, like bad endpoints."""
    state = fold_events(
        endpoints_snapshot_received(WEB_1, version="3", services=("default/web", "Bad Key", ""))
    )
    assert state.registry.services == immutables.Map({"default/web": True})
    rejection = state.diagnostics.rejections["registry"]
    assert rejection.reason is RejectionReason.INVALID_ENDPOINT
    assert rejection.message == (
        "2 entries of snapshot '3' left out: "
        "catalog: service key must be '<namespace>/<serviceAccount>' (got '');"
        " catalog: service key must be '<namespace>/<serviceAccount>' (got 'Bad Key')"
    )
