"""The node's service units: one per service of the dependency set, its clusters, endpoints and virtual hosts
(`services.project_service`), kept while its inputs are the same objects.

The pass is where a registry event at 10,000 services must cost one service, so it finds its candidates without a
Python step per service of the set. The registry's history (`RegistryState.changed_since`) names the services whose
endpoint maps were replaced since the maps the last pass saw; without one (a new snapshot, a checkpoint read, a
projector many steps behind) the pass compares every map of the set by identity, by `map` and `compress` at C speed.
A few services joining or leaving a set derived from the last one edit the list of endpoint maps where they sit.
The pass also reports which services' virtual hosts changed, so the route tables remake only their groups
(`route_groups`).
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from aether.core.gateway import MeshRouting
from aether.core.gateway.ir import SelectorKeys
from aether.core.project.dependencies import Demand
from aether.core.project.memo import interned
from aether.core.project.services import NOTHING, ServiceContext, ServiceProjection, project_service
from aether.core.project.units import ResourceChanges, same_inputs
from aether.core.snapshot import Piece, Resource
from aether.core.state.state import State

_FEW = 64
"""Up to this many services joining or leaving the set, the services pass edits its endpoint-map list in place."""

_ABSENT = object()
"""Stands for an input a unit did not have (never the same object as any input)."""


def _replaced(
    old: Mapping[str, object], new: Mapping[str, object], *, in_set: Mapping[str, object]
) -> Iterator[str]:
    """Yield the services of the set whose entry (routing, subsets, UDP ports) `new` holds another object for
    than `old` (or that only one of them has)."""
    return (
        service for service in {*new, *old} if service in in_set and new.get(service) is not old.get(service)
    )


class ServiceUnits:
    """The service units of one node's projections, and the virtual hosts of those that have any."""

    def __init__(self) -> None:
        self._services: dict[str, tuple[tuple[Any, ...], ServiceProjection]] = {}
        self._vhosts: dict[str, Piece] = {}
        """The services of `_services` that have virtual hosts, and their piece: the route tables' middle."""
        self._touched: set[str] = set()
        """The services the current projection's services pass dropped, added or changed the virtual hosts of."""
        self._inputs: tuple[Any, ...] | None = None
        self._endpoint_refs: list[Any] = []

    @property
    def vhosts(self) -> Mapping[str, Piece]:
        """The virtual hosts' piece of each service that has any, as of the last pass."""
        return self._vhosts

    def not_found(self, services: Iterable[str]) -> Iterator[str]:
        """Yield the names requested on demand of `services` that no cluster of theirs serves."""
        for service in services:
            yield from self._services[service][1].not_found

    def resources(self) -> Iterator[Resource]:
        """Yield the resources of every service unit."""
        for _, projection in self._services.values():
            yield from projection.resources

    def project(
        self,
        state: State,
        demand: Demand,
        context: ServiceContext,
        routings: Mapping[str, MeshRouting],
        tcp_backends: frozenset[str],
        subsets: Mapping[str, SelectorKeys],
        udp_ports: Mapping[str, tuple[int, ...]],
        changes: ResourceChanges,
    ) -> tuple[int, set[str] | None]:
        """Bring the service units in line; return how many were computed and the services that joined or left the
        set or whose virtual hosts changed (None: any may have)."""
        registry = state.registry
        self._touched = set()
        touched: set[str] | None = self._touched
        deps = demand.services
        previous = self._inputs
        refs = self._endpoint_refs
        if previous is not None and previous[1] is context:
            # Same context: only the services whose demand, endpoint map, catalog entry or routing changed.
            candidates: set[str] = set()
            old_demand: Demand = previous[0]
            if demand is not old_demand:
                old_deps = old_demand.services
                if (
                    deps != old_deps
                    and demand.moved_from is old_deps
                    and registry.endpoints is previous[2]
                    and len(demand.joined) + len(demand.left) <= _FEW
                ):
                    # A few services joined or left a set derived from the last one, the registry unchanged: those
                    # are the only candidates, and the endpoint maps' list is edited where they sit (O(changed)).
                    for service in demand.left:
                        self._drop(service, changes)
                    for at in sorted(
                        (bisect.bisect_left(old_deps, item) for item in demand.left), reverse=True
                    ):
                        del refs[at]
                    for service in demand.joined:
                        refs.insert(bisect.bisect_left(deps, service), registry.endpoints.get(service))
                    candidates.update(demand.joined)
                elif deps != old_deps:  # services joined or left the set: line the endpoint maps up by name
                    # (at C speed, `map`/`compress`: a set change costs no Python step per service of the set)
                    for service in sorted(
                        itertools.filterfalse(demand.by_service.__contains__, self._services)
                    ):
                        self._drop(service, changes)
                    held_refs = dict(zip(old_deps, self._endpoint_refs, strict=True))
                    refs = list(map(registry.endpoints.get, deps))
                    candidates.update(
                        itertools.compress(
                            deps,
                            map(operator.is_not, refs, map(held_refs.get, deps, itertools.repeat(_ABSENT))),
                        )
                    )
                # A service neither set requests has the one `declared` demand in both: only the requesting ones
                # (and those that joined, above) can differ.
                old_by_service, by_service = old_demand.by_service, demand.by_service
                candidates.update(
                    service
                    for service in {*old_demand.requesting, *demand.requesting}
                    if service in by_service and by_service[service] is not old_by_service.get(service)
                )
            if registry.endpoints is not previous[2] and refs is self._endpoint_refs:
                changed = registry.changed_since(previous[2])
                if changed is None:
                    # No history from the last maps (a new snapshot, a checkpoint read): compare them all.
                    refs = list(map(registry.endpoints.get, deps))
                    candidates.update(
                        itertools.compress(deps, map(operator.is_not, refs, self._endpoint_refs))
                    )
                else:
                    # The registry's history names the services whose maps were replaced since: O(changed).
                    maps, by_service = registry.endpoints, demand.by_service
                    for service in changed:
                        if service in by_service:
                            refs[bisect.bisect_left(deps, service)] = maps.get(service)
                            candidates.add(service)
            if registry.services is not previous[3]:
                candidates.update(demand.undeclared)
            if routings is not previous[4]:
                candidates.update(_replaced(previous[4], routings, in_set=demand.by_service))
            if tcp_backends is not previous[5]:
                candidates.update(
                    service
                    for service in tcp_backends.symmetric_difference(previous[5])
                    if service in demand.by_service
                )
            if subsets is not previous[6]:
                candidates.update(_replaced(previous[6], subsets, in_set=demand.by_service))
            if udp_ports is not previous[7]:
                candidates.update(_replaced(previous[7], udp_ports, in_set=demand.by_service))
            order: Iterable[str] = sorted(candidates)
        else:
            refs = list(map(registry.endpoints.get, deps))
            order = deps
            for service in sorted(set(self._services).difference(deps)):
                self._drop(service, changes)
            touched = None
        self._inputs = (
            demand,
            context,
            registry.endpoints,
            registry.services,
            routings,
            tcp_backends,
            subsets,
            udp_ports,
        )
        self._endpoint_refs = refs
        projected = 0
        for service in order:
            held = self._services.get(service)
            # A new set gives a requested service an equal demand of its own: keep the one it was projected from.
            service_demand = interned(held[0][1] if held is not None else None, demand.by_service[service])
            endpoints = registry.endpoints.get(service)
            in_catalog = service in registry.services
            routing = routings.get(service)
            tcp_backend = service in tcp_backends
            service_subsets = subsets.get(service, ())
            service_udp = udp_ports.get(service, ())
            inputs = (
                endpoints,
                service_demand,
                in_catalog,
                context,
                routing,
                tcp_backend,
                service_subsets,
                service_udp,
            )
            if held is not None and same_inputs(held[0], inputs):
                continue
            old = held[1] if held is not None else NOTHING
            new = project_service(
                service,
                endpoints,
                service_demand,
                in_catalog=in_catalog,
                context=context,
                routing=routing,
                tcp_backend=tcp_backend,
                subsets=service_subsets,
                udp_ports=service_udp,
            )
            vhosts = old.vhosts if old.vhosts == new.vhosts else new.vhosts
            if held is None:
                self._touched.add(service)
            if vhosts is not old.vhosts:
                self._touched.add(service)
                if vhosts.size:
                    self._vhosts[service] = vhosts
                else:
                    self._vhosts.pop(service, None)
            resources = changes.replace(old.resources, new.resources)
            self._services[service] = (
                inputs,
                ServiceProjection(resources=resources, vhosts=vhosts, not_found=new.not_found),
            )
            projected += 1
        return projected, touched

    def _drop(self, service: str, changes: ResourceChanges) -> None:
        changes.replace(self._services.pop(service)[1].resources, ())
        self._vhosts.pop(service, None)
        self._touched.add(service)
