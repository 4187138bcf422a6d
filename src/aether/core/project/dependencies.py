"""Demand scoping: the node's local pods, and the mesh services they need (and only those get Envoy config).

A node's dependency set is its local pods' own services, the services they declare in `config.aether.io/upstreams`
(parsed into `PodConfig.upstreams`), and the services its Envoy asked for on demand no longer ago than the mesh's
on-demand TTL before `now` (a caller's `quic:` cluster of a service both declare lives as long as the
declarations). `now` is a parameter (the agent passes the observation time of the last event it folded), so a replay
projects the same set.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping

import attrs
import immutables

from aether.core.mesh_names import ClusterName, parse_cluster_name
from aether.core.order import sorted_items, sorted_unique
from aether.core.state.feedback import OnDemandRequest
from aether.core.state.pods import PodRecord

_NANOSECONDS = 1_000_000_000


@attrs.frozen(kw_only=True)
class LocalPods:
    """The pods this node serves, and which of them get listeners."""

    records: tuple[PodRecord, ...]
    """The node's pods, sorted by `<namespace>/<name>`."""
    bound: frozenset[str]
    """Keys of the pods that get listeners: those with a place to bind (a network namespace, or an IP in local
    mode) that no pod sorted before them already took. Two listeners on one address would make Envoy reject the
    whole listener update, so the first pod keeps the place and the others wait until it is free."""
    joining: frozenset[str] = frozenset()
    """Keys of the pods of a captured node whose network namespace is not known yet (no CNI ADD so far): they
    have no place to bind, and are not registered either, until the ADD reports the namespace."""


def bind_place(record: PodRecord, *, captured: bool = False) -> tuple[str, str] | None:
    """Return where `record`'s listeners bind: `(netns, "")` inside its namespace, `("", ip)` in local mode.

    A pod of a captured node binds in its namespace or nowhere: its IP belongs to that namespace, so a listener
    on it in the node's namespace cannot bind (Envoy would reject the listener update) and would capture nothing.
    """
    pod = record.pod
    if pod.netns:
        return (pod.netns, "")
    if pod.ips and not captured:
        return ("", pod.ips[0])
    return None


def local_pods(
    pods: Mapping[str, PodRecord], *, node_name: str, captured_nodes: frozenset[str] = frozenset()
) -> LocalPods:
    """Return the pods of `node_name` (every pod when `node_name` is empty, the single-node local mode).

    `captured_nodes` are the nodes whose pods join through CNI ADD (`State.captured_nodes`); a pod counts as
    captured when its own node is one of them.
    """
    records = tuple(
        record for _, record in sorted_items(pods) if not node_name or record.pod.node_name == node_name
    )
    taken: set[tuple[str, str]] = set()
    bound: list[str] = []
    joining: list[str] = []
    for record in records:
        captured = record.pod.node_name in captured_nodes
        place = bind_place(record, captured=captured)
        if place is None and captured:
            joining.append(record.pod.key)
        elif place is not None and place not in taken:
            taken.add(place)
            bound.append(record.pod.key)
    return LocalPods(records=records, bound=frozenset(bound), joining=frozenset(joining))


def declared_services(records: Iterable[PodRecord]) -> tuple[str, ...]:
    """Return the services the pods run and declare as upstreams, sorted and distinct."""
    services: list[str] = []
    for record in records:
        services.append(record.service)
        services.extend(record.config.upstreams)
    return sorted_unique(services)


_FEW = 64
"""Up to this many services joining or leaving, the sorted set is edited in place; beyond, sorted again."""


@attrs.frozen(kw_only=True, eq=False)
class Declarations:
    """The services local pods run and declare (`services`), with what they were counted from, so that a pod
    coming, going or changing updates them in O(its own names), not O(the set) (`declarations`)."""

    services: tuple[str, ...]
    """`declared_services(records)`: sorted and distinct."""
    records: Mapping[str, PodRecord]
    """The pods counted, by key."""
    counts: immutables.Map[str, int]
    """Per service, how many times the pods name it (as their own service or an upstream)."""
    base: tuple[str, ...] | None = None
    """The `services` of the declarations these were derived from (None: counted from scratch)."""
    joined: tuple[str, ...] = ()
    """The services of `services` not in `base`, sorted."""
    left: tuple[str, ...] = ()
    """The services of `base` not in `services`, sorted."""


def _names(record: PodRecord) -> tuple[str, ...]:
    return (record.service, *record.config.upstreams)


def declarations(records: Iterable[PodRecord], *, previous: Declarations | None = None) -> Declarations:
    """Return the declarations of `records`: counted from scratch, or from `previous` by the records that are not
    the very objects it counted (O(their names)); `services` is then `previous.services` itself when no service
    came or went."""
    by_key = {record.pod.key: record for record in records}
    if previous is None:
        counted: dict[str, int] = {}
        for record in by_key.values():
            for name in _names(record):
                counted[name] = counted.get(name, 0) + 1
        return Declarations(services=tuple(sorted(counted)), records=by_key, counts=immutables.Map(counted))
    held, before = previous.records, previous.counts
    counts = before.mutate()
    touched: set[str] = set()
    for key, record in held.items():
        if by_key.get(key) is not record:
            for name in _names(record):
                counts[name] = counts[name] - 1
                touched.add(name)
    for key, record in by_key.items():
        if held.get(key) is not record:
            for name in _names(record):
                counts[name] = counts.get(name, 0) + 1
                touched.add(name)
    joined, left = [], []
    for name in touched:
        if not counts[name]:
            del counts[name]
            left.append(name)
        elif name not in before:
            joined.append(name)
    finished = counts.finish()
    services = previous.services
    if len(joined) + len(left) > _FEW:
        services = tuple(sorted(finished))
    elif joined or left:
        edited = list(services)
        for name in left:
            del edited[bisect.bisect_left(edited, name)]
        for name in joined:
            bisect.insort(edited, name)
        services = tuple(edited)
    return Declarations(
        services=services,
        records=by_key,
        counts=finished,
        base=previous.services,
        joined=tuple(sorted(joined)),
        left=tuple(sorted(left)),
    )


def _holds(ordered: tuple[str, ...], name: str) -> bool:
    """Whether the sorted `ordered` holds `name` (a binary search: no set of thousands built for a few lookups)."""
    at = bisect.bisect_left(ordered, name)
    return at < len(ordered) and ordered[at] == name


@attrs.frozen(kw_only=True)
class RequestIndex:
    """The on-demand requests of one node, each with the time it expires, ordered by that time."""

    expiries: tuple[int, ...]
    """`last_requested_at + ttl` of each request, ascending (nanoseconds)."""
    names: tuple[str, ...]
    """The requested cluster names, in the order of `expiries`."""
    parsed: tuple[ClusterName | None, ...]
    """Each name taken apart under the mesh domain in force (None: it names no mesh service)."""

    def live_from(self, now: int) -> int:
        """Return the index of the first request still live at `now` (its expiry is not before `now`).

        Requests expire in `expiries` order, so the live ones are a suffix: the set changes only when `now`
        crosses an expiry, which is what lets the projector keep its demand between two events.
        """
        low, high = 0, len(self.expiries)
        while low < high:  # the first index whose expiry is >= now (a binary search: requests can be many)
            middle = (low + high) // 2
            if self.expiries[middle] < now:
                low = middle + 1
            else:
                high = middle
        return low


def request_index(
    on_demand: Mapping[tuple[str, str], OnDemandRequest],
    *,
    node_name: str,
    mesh_domain: str,
    ttl_seconds: int,
) -> RequestIndex:
    """Return the on-demand requests of `node_name` (of every node when empty), ordered by expiry."""
    ttl = ttl_seconds * _NANOSECONDS
    rows = sorted(
        (request.last_requested_at + ttl, request.cluster_name)
        for (node_id, _), request in on_demand.items()
        if not node_name or node_id == node_name
    )
    return RequestIndex(
        expiries=tuple(expiry for expiry, _ in rows),
        names=tuple(name for _, name in rows),
        parsed=tuple(parse_cluster_name(name, mesh_domain=mesh_domain) for _, name in rows),
    )


@attrs.frozen(kw_only=True)
class ServiceDemand:
    """Why a service is in the dependency set, and which of its clusters were asked for by name."""

    declared: bool
    """A local pod runs the service or declares it as an upstream: it gets config even while the registry has no
    endpoints (or no catalog entry) for it. A service only requested on demand needs a catalog entry."""
    requested: tuple[str, ...] = ()
    """The service's cluster names requested on demand within the TTL, sorted."""


_DECLARED = ServiceDemand(declared=True)


@attrs.frozen(kw_only=True)
class Demand:
    """The node's dependency set."""

    services: tuple[str, ...]
    """Every service in the set, sorted."""
    by_service: immutables.Map[str, ServiceDemand]
    """Each service's demand."""
    requesting: tuple[str, ...]
    """The services with names requested on demand, sorted (only they can leave a request unanswered)."""
    undeclared: tuple[str, ...]
    """The services in the set only because they were requested, sorted (only their catalog entry matters)."""
    unmatched: tuple[str, ...]
    """Live requested names that name no mesh service under the mesh domain in force (answered as not found)."""
    moved_from: tuple[str, ...] | None = attrs.field(default=None, eq=False, repr=False)
    """The `services` of the demand this one was derived from (`demand(previous=...)`), None when computed whole:
    not part of the value, only a shortcut for whoever held that demand."""
    joined: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)
    """With `moved_from`: the services of the set not in it, sorted."""
    left: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)
    """With `moved_from`: its services no longer in the set, sorted."""


def _held_quic(
    declared: tuple[str, ...], index: RequestIndex, *, live_from: int
) -> list[tuple[str, ClusterName]]:
    """The expired requests that stay: `quic:` clusters of a declared caller to a declared service.

    Envoy asks for a cluster once and then holds it; it says nothing about using it. A caller's `quic:` cluster of
    a service it declares is what its requests to that service ride (`aether.core.project.quic`), so it lives as
    long as both declarations, not for the on-demand TTL: dropping it would fail the pair's requests until Envoy
    asked again.
    """
    return [
        (name, parsed)
        for name, parsed in zip(index.names[:live_from], index.parsed[:live_from], strict=True)
        if parsed is not None
        and parsed.protocol == "quic"
        and _holds(declared, parsed.service)
        and _holds(declared, parsed.source)
    ]


def demand(
    declared: tuple[str, ...],
    index: RequestIndex,
    *,
    live_from: int,
    previous: Demand | None = None,
    joined: Collection[str] = (),
    left: Collection[str] = (),
) -> Demand:
    """Return the dependency set: `declared` (sorted and distinct: `declared_services`) plus the services of the
    requests from `live_from` on (and the `quic:` clusters between declared services, whatever their age:
    `_held_quic`).

    With `previous`, the demand of the declared services `declared` minus `joined` plus `left` (under any
    requests), the result (equal to the one computed without it) is derived from it in O(joined + left +
    requests): only those services and the requesting ones can have another demand.
    """
    requested: dict[str, list[str]] = {}
    unmatched: list[str] = []
    for name, held in _held_quic(declared, index, live_from=live_from):
        requested.setdefault(held.service, []).append(name)
    for name, parsed in zip(index.names[live_from:], index.parsed[live_from:], strict=True):
        if parsed is None:
            unmatched.append(name)
        else:
            requested.setdefault(parsed.service, []).append(name)
    if previous is not None:
        return _derived(previous, declared, requested, unmatched, {*joined, *left})
    by_service = dict.fromkeys(declared, _DECLARED)
    undeclared: list[str] = []
    for service, names in requested.items():
        is_declared = (
            service in by_service
        )  # only declared services are in it yet: `requested` keys are distinct
        if not is_declared:
            undeclared.append(service)
        by_service[service] = ServiceDemand(declared=is_declared, requested=sorted_unique(names))
    return Demand(
        # `declared` is sorted and distinct: the set is it when every request is of a declared service.
        services=tuple(sorted(by_service)) if undeclared else declared,
        by_service=immutables.Map(by_service),
        requesting=tuple(sorted(requested)),
        undeclared=tuple(sorted(undeclared)),
        unmatched=sorted_unique(unmatched),
    )


def _derived(
    previous: Demand,
    declared: tuple[str, ...],
    requested: Mapping[str, list[str]],
    unmatched: list[str],
    moved: set[str],
) -> Demand:
    """`demand(...)` from `previous`: the services in `moved` (declared or no more) and those requesting now or
    before get their demand again; every other one keeps its entry (the same object)."""
    before = previous.by_service
    by_service = before.mutate()
    undeclared = set(previous.undeclared)
    joined: list[str] = []
    left: list[str] = []
    for service in moved.union(previous.requesting, requested):
        is_declared = _holds(declared, service)
        names = requested.get(service)
        if names is not None:
            value = ServiceDemand(declared=is_declared, requested=sorted_unique(names))
            held = before.get(service)
            by_service[service] = held if held is not None and held == value else value
        elif is_declared:
            by_service[service] = _DECLARED
        elif service in by_service:
            del by_service[service]
        if names is not None and not is_declared:
            undeclared.add(service)
        else:
            undeclared.discard(service)
        if (service in by_service) != (service in before):
            (joined if service in by_service else left).append(service)
    return Demand(
        services=tuple(sorted((*declared, *undeclared))) if undeclared else declared,
        by_service=by_service.finish(),
        requesting=tuple(sorted(requested)),
        undeclared=tuple(sorted(undeclared)),
        unmatched=sorted_unique(unmatched),
        moved_from=previous.services,
        joined=tuple(sorted(joined)),
        left=tuple(sorted(left)),
    )
