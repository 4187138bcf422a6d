"""What this node knows of the mesh registry: the service catalog and the endpoints of its services, and the last
steps that replaced endpoint maps (`EndpointStep`: what an incremental projector reads to visit only those)."""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import immutables

from aether.core.events.registry import Endpoint, Protocol

ServiceEndpoints = immutables.Map[tuple[Protocol, str], Endpoint]
"""One service's endpoints keyed by `(protocol, ip)`."""

EndpointMaps = immutables.Map[str, ServiceEndpoints]
"""The endpoint maps by service key."""

_NO_ENDPOINTS: ServiceEndpoints = immutables.Map()

MAX_ENDPOINT_STEPS = 64
"""Steps an `EndpointStep` chain holds at most (each keeps its `before` map alive: a path of the HAMT, ~1 KB at
10,000 services). The journal projects after every batch, so a projector is one or a few steps behind; one further
behind compares the maps whole, once."""


@attrs.frozen(kw_only=True, eq=False, slots=True, weakref_slot=False)
class EndpointStep:
    """One fold step that replaced endpoint maps: the registry's maps before and after it, and the services whose
    map it replaced (exactly those whose map is not the same object in both). Chained to the step before it when
    that one ended at `before` (a continuous history), at most `MAX_ENDPOINT_STEPS` deep.

    Compared by identity: a step is history, not part of the registry's value.
    """

    before: EndpointMaps
    after: EndpointMaps
    services: frozenset[str]
    previous: EndpointStep | None
    depth: int
    """Steps in the chain, this one included."""


@attrs.frozen(kw_only=True)
class RegistryState:
    """The registry as streamed by the registrar.

    Invariant: every key of `endpoints` is in `services` (an endpoint never outlives its service's catalog entry).
    """

    version: str = ""
    """The registrar's version of the last applied registry event."""
    synced: bool = False
    """True once a (re)sync completed; False from a new full snapshot until its completion."""
    services: immutables.Map[str, bool] = immutables.Map()
    """The mesh service catalog (a set: every value is True)."""
    endpoints: EndpointMaps = immutables.Map()
    """Endpoints by service key, then by `(protocol, ip)`. Services without endpoints have no entry."""
    history: EndpointStep | None = attrs.field(default=None, eq=False, repr=False)
    """The last steps that replaced endpoint maps, newest first (None: none known). History, not part of the
    registry's value: equality, the codec and the state digest ignore it, and a registry decoded from a checkpoint
    has none. Only `changed_since` reads it."""

    def endpoints_of(self, service: str) -> ServiceEndpoints:
        """Return the endpoints of `service` (empty if it has none)."""
        return self.endpoints.get(service, _NO_ENDPOINTS)

    def endpoint_count(self) -> int:
        """Return how many endpoints the registry holds."""
        return sum(len(items) for items in self.endpoints.values())

    def history_to(self, endpoints: EndpointMaps, *, changed: Iterable[str]) -> EndpointStep | None:
        """Return the history of a registry whose maps are `endpoints`, made from this one's by replacing the maps
        of the services `changed` (a superset of them: those whose map is the same object are left out).

        The step chains to this registry's history when that ended at its maps (else the history starts afresh);
        a chain `MAX_ENDPOINT_STEPS` deep starts afresh too. O(changed).
        """
        before = self.endpoints
        if endpoints is before:
            return self.history
        services = frozenset(
            service for service in changed if before.get(service) is not endpoints.get(service)
        )
        held = self.history
        if held is not None and (held.after is not before or held.depth >= MAX_ENDPOINT_STEPS):
            held = None
        return EndpointStep(
            before=before,
            after=endpoints,
            services=services,
            previous=held,
            depth=1 if held is None else held.depth + 1,
        )

    def changed_since(self, endpoints: EndpointMaps) -> frozenset[str] | None:
        """Return the services whose endpoint map may differ between `endpoints` (an earlier registry's) and this
        registry's, or None when the history does not lead from those maps to these (the caller compares all).

        Exact for one step; over several, a service whose map came back to the same object is listed too (an
        endpoint added to a service without any, then removed: no map in both). Costs O(steps walked + changed).
        """
        if endpoints is self.endpoints:
            return frozenset()
        step = self.history
        if step is None or step.after is not self.endpoints:
            return None
        changed: set[str] = set()
        while step is not None:
            changed.update(step.services)
            if step.before is endpoints:
                return frozenset(changed)
            step = step.previous
        return None
