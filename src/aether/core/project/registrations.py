"""Registration intents: the endpoints this node's pods must have in the registrar.

The agent is the only writer of its node's endpoints (the registrar accepts an endpoint only from the agent of the
node it runs on). What it registers is a pure function of the folded state, like the Envoy snapshot: each local pod
is one endpoint of its mesh service, at its first IP (the address the mesh binds), with the port, extra ports,
weight, protocol and health-check mode its annotations set, and the pod's labels (what Service selectors match: a
backendRef reaches only the pods its Service selects). A sink diffs this set against what it registered
(`registration_diff`, and `unwanted_ips` for what the registrar lists after a restart) and calls the registrar;
a replay of the log gives the same intents.

A pod of a captured node registers only once CNI ADD has reported its network namespace (see
`LocalPods.joining`): registered earlier, callers would dial an inbound listener that does not exist yet, and
their outlier detection would eject the endpoint for its connection failures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from aether.core.events.registry import Endpoint, EndpointKey
from aether.core.project.dependencies import local_pods
from aether.core.state.pods import PodRecord
from aether.core.state.state import State


def pod_endpoint(record: PodRecord, *, cluster_name: str) -> Endpoint | None:
    """Return the endpoint `record`'s pod registers, or None while it has no IP."""
    pod, config = record.pod, record.config
    if not pod.ips:
        return None
    return Endpoint(
        service=record.service,
        protocol=config.protocol,
        ip=pod.ips[0],
        port=config.port,
        ports=tuple(port for port in config.ports if port != config.port),
        weight=config.weight,
        health_check_mode=config.health_check_mode,
        namespace=pod.namespace,
        pod_name=pod.name,
        node_name=pod.node_name,
        cluster_name=cluster_name,
        labels=pod.labels,
    )


def local_endpoints(state: State, *, node_name: str, cluster_name: str) -> dict[EndpointKey, Endpoint]:
    """Return the endpoints of `node_name`'s pods (every pod when empty), keyed and ordered by endpoint key.

    Two pods claiming one IP (a stale record beside its replacement) register once: the first by pod key wins,
    the same pod whose listeners bind that address.
    """
    endpoints: dict[EndpointKey, Endpoint] = {}
    local = local_pods(state.pods, node_name=node_name, captured_nodes=state.captured_nodes)
    for record in local.records:
        if record.pod.key in local.joining:
            continue
        endpoint = pod_endpoint(record, cluster_name=cluster_name)
        if endpoint is not None and endpoint.key not in endpoints:
            endpoints[endpoint.key] = endpoint
    return dict(sorted(endpoints.items()))


@attrs.frozen(kw_only=True)
class RegistrationDiff:
    """The calls that make the registrar's record of this node equal to the intents, in the order to make them."""

    unregister: tuple[EndpointKey, ...] = ()
    """Registered endpoints no intent holds any more, by key."""
    register: tuple[Endpoint, ...] = ()
    """Intents that are new or differ from what was registered, in key order."""


def registration_diff(
    registered: Mapping[EndpointKey, Endpoint], wanted: Mapping[EndpointKey, Endpoint]
) -> RegistrationDiff:
    """Return what to unregister and register so that `registered` becomes `wanted` (an equal endpoint: nothing)."""
    return RegistrationDiff(
        unregister=tuple(key for key in sorted(registered) if key not in wanted),
        register=tuple(
            endpoint for key, endpoint in sorted(wanted.items()) if registered.get(key) != endpoint
        ),
    )


def unwanted_ips(service: str, ips: Iterable[str], *, wanted: Mapping[EndpointKey, Endpoint]) -> list[str]:
    """Return, sorted, the IPs of `service` the registrar holds for this node that no intent holds (any protocol).

    After a restart the registrar may still list endpoints of pods that left while the agent was down.
    """
    keep = {key[2] for key in wanted if key[0] == service}
    return sorted(set(ips) - keep)
