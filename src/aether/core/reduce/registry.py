"""Reducers of registry events (the registrar's WatchEndpoints stream).

Versions are the registrar's monotonic decimal counters: an event older than the state's version is stale and
rejected (a reordered or replayed delivery), one at the same version re-applies idempotently.
"""

from __future__ import annotations

import itertools
from collections.abc import Set as AbstractSet
from typing import TypeVar

import attrs
import immutables

from aether.core.events.base import Event
from aether.core.events.batch import UpsertBatch, decode_upsert_endpoints
from aether.core.events.codec import PendingUpsert
from aether.core.events.registry import (
    Endpoint,
    EndpointAdded,
    EndpointRemoved,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    EndpointUpdated,
    Protocol,
    RegistryServiceAdded,
    RegistryServiceRemoved,
    endpoint_subject,
)
from aether.core.reduce.common import applied, next_state, rejected
from aether.core.state.diagnostics import RejectionReason
from aether.core.state.registry import RegistryState, ServiceEndpoints
from aether.core.state.state import State
from aether.core.validation import ip_problem, port_problem, service_key_problem


def _version_problem(current: str, incoming: str) -> tuple[RejectionReason, str] | None:
    if not (incoming.isascii() and incoming.isdigit()):
        return (
            RejectionReason.INVALID_VERSION,
            f"registry version must be a decimal counter (got {incoming!r})",
        )
    if current and int(incoming) < int(current):
        return (
            RejectionReason.STALE_VERSION,
            f"registry version {incoming!r} is older than the applied {current!r}",
        )
    return None


def _endpoint_problem(endpoint: Endpoint) -> str | None:
    problem = (
        service_key_problem(endpoint.service)
        or ip_problem(endpoint.ip, what="ip")
        or port_problem(endpoint.port, what="port")
        or (None if endpoint.weight >= 1 else f"weight must be at least 1 (got {endpoint.weight!r})")
    )
    for port in endpoint.ports:  # a loop, not a generator: most endpoints list no extra ports
        problem = problem or port_problem(port, what="ports")
    return None if problem is None else f"endpoint {endpoint.service}/{endpoint.ip}: {problem}"


def _checked(
    state: State, event: Event, seq: int, version: str, *, current: str | None = None
) -> State | None:
    """Return the rejected state if `version` cannot apply after `current` (default: the applied one), else None."""
    problem = _version_problem(state.registry.version if current is None else current, version)
    if problem is None:
        return None
    reason, message = problem
    return rejected(state, event, seq, reason=reason, message=message)


def endpoints_snapshot_received(state: State, event: EndpointsSnapshotReceived, seq: int) -> State:
    """Replace the whole registry view: what the snapshot lacks has vanished. Bad entries are left out.

    A snapshot is accepted at any version, even one below the applied version: it is the registrar's whole truth,
    and a restarted (or another active) registrar may count from a lower number. Incremental events after it are
    then checked against the snapshot's version.
    """
    failed = _checked(state, event, seq, event.version, current="")  # its form only: any version resets
    if failed is not None:
        return failed
    problems: list[str] = []
    catalog: list[str] = []
    for service in event.services:
        problem = service_key_problem(service)
        if problem is None:
            catalog.append(service)
        else:
            problems.append(f"catalog: {problem}")
    services = immutables.Map((service, True) for service in sorted(set(catalog)))
    grouped: dict[str, dict[tuple[Protocol, str], Endpoint]] = {}
    for endpoint in event.endpoints:
        problem = _endpoint_problem(endpoint)
        if problem is None and endpoint.service not in services:
            problem = f"endpoint {endpoint.service}/{endpoint.ip}: service {endpoint.service!r} is not in the catalog"
        if problem is None:
            grouped.setdefault(endpoint.service, {})[(endpoint.protocol, endpoint.ip)] = endpoint
        else:
            problems.append(problem)
    endpoints: immutables.Map[str, ServiceEndpoints] = immutables.Map(
        {service: ServiceEndpoints(items) for service, items in grouped.items()}
    )
    # Every map is new: the registry starts without history (an incremental projector compares them all, once).
    registry = RegistryState(version=event.version, synced=False, services=services, endpoints=endpoints)
    state = applied(state, event, seq, registry=registry)
    if problems:
        message = f"{len(problems)} entries of snapshot {event.version!r} left out: " + "; ".join(
            sorted(problems)
        )
        return rejected(state, event, seq, reason=RejectionReason.INVALID_ENDPOINT, message=message)
    return state


def endpoints_snapshot_completed(state: State, event: EndpointsSnapshotCompleted, seq: int) -> State:
    """Mark the registry view complete at the event's version."""
    failed = _checked(state, event, seq, event.version)
    if failed is not None:
        return failed
    return applied(
        state, event, seq, registry=attrs.evolve(state.registry, version=event.version, synced=True)
    )


def _upsert_endpoint(state: State, event: EndpointAdded | EndpointUpdated, seq: int) -> State:
    failed = _checked(state, event, seq, event.version)
    if failed is not None:
        return failed
    endpoint = event.endpoint
    problem = _endpoint_problem(endpoint)
    if problem is not None:
        return rejected(state, event, seq, reason=RejectionReason.INVALID_ENDPOINT, message=problem)
    registry = state.registry
    if endpoint.service not in registry.services:
        message = (
            f"endpoint {endpoint.service}/{endpoint.ip}: service {endpoint.service!r} is not in the catalog"
        )
        return rejected(state, event, seq, reason=RejectionReason.UNKNOWN_SERVICE, message=message)
    items = registry.endpoints_of(endpoint.service).set((endpoint.protocol, endpoint.ip), endpoint)
    endpoints = registry.endpoints.set(endpoint.service, items)
    new_registry = RegistryState(
        version=event.version,
        synced=registry.synced,
        services=registry.services,
        endpoints=endpoints,
        history=registry.history_to(endpoints, changed=(endpoint.service,)),
    )
    return applied(state, event, seq, registry=new_registry)


def endpoint_added(state: State, event: EndpointAdded, seq: int) -> State:
    """Upsert the endpoint (a duplicate delivery re-applies to the same state)."""
    return _upsert_endpoint(state, event, seq)


def endpoint_updated(state: State, event: EndpointUpdated, seq: int) -> State:
    """Upsert the endpoint."""
    return _upsert_endpoint(state, event, seq)


def endpoint_removed(state: State, event: EndpointRemoved, seq: int) -> State:
    """Remove the endpoint; one the registry view does not hold is a rejection."""
    failed = _checked(state, event, seq, event.version)
    if failed is not None:
        return failed
    registry = state.registry
    items = registry.endpoints_of(event.service)
    key = (event.protocol, event.ip)
    if key not in items:
        message = f"endpoint {event.service}/{event.ip} ({event.protocol.name.lower()}) removed but not known"
        return rejected(state, event, seq, reason=RejectionReason.UNKNOWN_ENDPOINT, message=message)
    remaining = items.delete(key)
    endpoints = (
        registry.endpoints.set(event.service, remaining)
        if remaining
        else registry.endpoints.delete(event.service)
    )
    new_registry = attrs.evolve(
        registry,
        version=event.version,
        endpoints=endpoints,
        history=registry.history_to(endpoints, changed=(event.service,)),
    )
    return applied(state, event, seq, registry=new_registry)


def registry_service_added(state: State, event: RegistryServiceAdded, seq: int) -> State:
    """Add the service to the catalog."""
    failed = _checked(state, event, seq, event.version)
    if failed is not None:
        return failed
    problem = service_key_problem(event.service)
    if problem is not None:
        return rejected(state, event, seq, reason=RejectionReason.INVALID_SERVICE, message=problem)
    registry = state.registry
    new_registry = attrs.evolve(
        registry, version=event.version, services=registry.services.set(event.service, True)
    )
    return applied(state, event, seq, registry=new_registry)


def registry_service_removed(state: State, event: RegistryServiceRemoved, seq: int) -> State:
    """Remove the service from the catalog, with its endpoints. An unknown service is a rejection."""
    failed = _checked(state, event, seq, event.version)
    if failed is not None:
        return failed
    registry = state.registry
    if event.service not in registry.services:
        message = f"service {event.service!r} removed but not in the catalog"
        return rejected(state, event, seq, reason=RejectionReason.UNKNOWN_SERVICE, message=message)
    endpoints = (
        registry.endpoints.delete(event.service)
        if event.service in registry.endpoints
        else registry.endpoints
    )
    new_registry = attrs.evolve(
        registry,
        version=event.version,
        services=registry.services.delete(event.service),
        endpoints=endpoints,
        history=registry.history_to(endpoints, changed=(event.service,)),
    )
    return applied(state, event, seq, registry=new_registry)


_PROTOCOL_OF = {member.value: member for member in Protocol}

_NO_ENDPOINTS: immutables.Map[tuple[Protocol, str], Endpoint] = immutables.Map()


_T = TypeVar("_T")


def _new_in(column: list[_T], known: set[_T]) -> AbstractSet[_T]:
    """The values of `column` not in `known` (none, without building a set, when `known` holds them all)."""
    if known.issuperset(column):
        return frozenset()
    return set(column).difference(known)


class UpsertRun:
    """Consecutive endpoint upserts folded as one step: the state `_upsert_endpoint` gives after each in turn, built once.

    Replay and the journal fold runs of thousands of `EndpointAdded`/`EndpointUpdated`; folding them one by one
    copies a path of the 10,000-service map and builds a `RegistryState` and a `State` per event, only for the next
    event to drop them. A run keeps the last upsert of each endpoint instead and builds the maps and the state once,
    at `finish`. It is still pure: nothing outside the run sees a mutation, and the result equals folding each event.

    A run also takes replay's `PendingUpsert` (a record parsed but not built) and `UpsertBatch` (records decoded as
    columns): it checks the fields it reads and builds the `Endpoint` only for the last upsert of each endpoint, at
    `finish`.

    `add` takes only events that apply cleanly (current version, valid endpoint, known service, no rejection of its
    subject to lift); for any other it returns False and the caller folds it the ordinary way, after `finish`.
    `add_batch` takes a whole batch when every record of it applies cleanly, else nothing.
    """

    def __init__(self, state: State) -> None:
        self._state = state
        self._registry = state.registry
        self._version = state.registry.version
        # The applied version as a number (-1: none yet), so each event's check parses only its own version.
        self._version_number = int(self._version) if self._version else -1
        self._rejections = state.diagnostics.rejections
        self._latest: dict[str, dict[tuple[Protocol, str], Endpoint | PendingUpsert | bytes]] = {}
        # A batch's records, as their payloads, by (service, protocol wire value, ip): `add_batch` updates it in one
        # call; moved into `_latest` (in order) before any upsert `add` takes, and at `finish`.
        self._batched: dict[tuple[str, int, str], bytes] = {}
        # Service keys, IPs and ports already found valid in this run: churn repeats them, and the checks are regexes.
        self._valid_services: set[str] = set()
        self._valid_ips: set[str] = set()
        self._valid_ports: set[int] = set()
        self._seq = state.seq

    def add(self, event: EndpointAdded | EndpointUpdated | PendingUpsert, seq: int) -> bool:
        """Fold `event` at `seq` into the run and return True, or return False (nothing changed) when it would not
        apply cleanly."""
        fields: Endpoint | PendingUpsert = event if isinstance(event, PendingUpsert) else event.endpoint
        version, service, ip = event.version, fields.service, fields.ip
        if not (version.isascii() and version.isdigit()) or int(version) < self._version_number:
            return False
        if service not in self._valid_services:
            if service_key_problem(service) is not None or service not in self._registry.services:
                return False
            self._valid_services.add(service)
        if ip not in self._valid_ips:
            if ip_problem(ip, what="ip") is not None:
                return False
            self._valid_ips.add(ip)
        if port_problem(fields.port, what="port") is not None or fields.weight < 1:
            return False
        for port in fields.ports:
            if port_problem(port, what="ports") is not None:
                return False
        if self._rejections and event.subject in self._rejections:
            return False
        if self._batched:
            self._move_batched()
        items = self._latest.get(service)
        if items is None:
            items = self._latest[service] = {}
        items[(fields.protocol, ip)] = fields
        if version != self._version:
            self._version, self._version_number = version, int(version)
        self._seq = seq
        return True

    def _move_batched(self) -> None:
        latest = self._latest
        for (service, protocol, ip), payload in self._batched.items():
            items = latest.get(service)
            if items is None:
                items = latest[service] = {}
            items[(_PROTOCOL_OF[protocol], ip)] = payload
        self._batched = {}

    def add_batch(self, batch: UpsertBatch, first_seq: int) -> bool:
        """Fold the records of `batch` (at `first_seq` on) into the run and return True when every one applies
        cleanly (the checks of `add`, made per column); else return False, having changed nothing."""
        versions = batch.versions
        digits = "".join(versions)  # no version is empty (a batch holds each field of each record)
        if not (digits.isascii() and digits.isdigit()):
            return False
        numbers = list(map(int, versions))
        if numbers[0] < self._version_number or numbers != sorted(numbers):
            return False
        services, ips, ports = batch.services, batch.ips, batch.ports
        if min(batch.weights) < 1:
            return False
        # Churn repeats what the run has already found valid: `issuperset` reads a column without building a set.
        new_services = _new_in(services, self._valid_services)
        new_ips = _new_in(ips, self._valid_ips)
        new_ports = _new_in(ports, self._valid_ports)
        for service in new_services:
            if service_key_problem(service) is not None or service not in self._registry.services:
                return False
        for ip in new_ips:
            if ip_problem(ip, what="ip") is not None:
                return False
        for port in new_ports:
            if port_problem(port, what="port") is not None:
                return False
        if batch.extra_ports is not None:
            for port in set(itertools.chain.from_iterable(batch.extra_ports)):
                if port_problem(port, what="ports") is not None:
                    return False
        if self._rejections:
            rejections = self._rejections
            for service, protocol, ip in zip(services, batch.protocols, ips, strict=True):
                if endpoint_subject(service, _PROTOCOL_OF[protocol], ip) in rejections:
                    return False
        if new_services:
            self._valid_services |= new_services
        if new_ips:
            self._valid_ips |= new_ips
        if new_ports:
            self._valid_ports |= new_ports
        self._batched.update(
            zip(zip(services, batch.protocols, ips, strict=True), batch.payloads, strict=True)
        )
        self._version, self._version_number = versions[-1], numbers[-1]
        self._seq = first_seq + len(numbers) - 1
        return True

    def finish(self) -> State:
        """Return the state after every event added (the state the run began from if none was)."""
        if self._batched:
            self._move_batched()
        if not self._latest:
            return self._state
        # The records left as payloads are built together (in the order the loop below meets them).
        built = iter(
            decode_upsert_endpoints(
                [
                    value
                    for latest in self._latest.values()
                    for value in latest.values()
                    if isinstance(value, bytes)
                ]
            )
        )
        endpoints = self._registry.endpoints.mutate()
        for service, latest in self._latest.items():
            items = endpoints.get(service, _NO_ENDPOINTS).mutate()
            for key, value in latest.items():
                if isinstance(value, Endpoint):
                    items[key] = value
                elif isinstance(value, bytes):
                    items[key] = next(built)
                else:
                    items[key] = value.endpoint()
            endpoints[service] = items.finish()
        maps = endpoints.finish()
        registry = RegistryState(
            version=self._version,
            synced=self._registry.synced,
            services=self._registry.services,
            endpoints=maps,
            history=self._registry.history_to(maps, changed=self._latest),
        )
        return next_state(self._state, self._seq, {"registry": registry})
