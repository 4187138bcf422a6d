"""The registry endpoint a Kubernetes Pod stands for: its mesh settings, health from its phase and readiness,
locality from its Node. Pure: objects in, an `Endpoint` (or the reason there is none) out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from aether.core.events.pods import PodAdded
from aether.core.events.registry import Endpoint, Health
from aether.core.reduce.admission import admit_pod
from aether.core.reduce.annotations import parse_pod_config
from aether.core.state.pods import PodRecord
from aether.kube.convert import ObjectError, object_events
from aether.kube.offline import pod_endpoint
from aether.kube.resources import JsonObject

__all__ = ["MANAGED_SELECTOR", "REGION_LABEL", "ZONE_LABEL", "PodEndpoint", "pod_endpoint_of"]

MANAGED_SELECTOR = "aether.io/managed=true"
"""The label selector of the pods that join the mesh (DESIGN.md section 4), applied by the API server."""

REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"


@attrs.frozen(kw_only=True)
class PodEndpoint:
    """What a pod contributes to the registry: an endpoint, or none, and the problems found on the way."""

    endpoint: Endpoint | None
    problems: tuple[str, ...] = ()
    """Why there is no endpoint, or which annotations were ignored (their defaults used instead)."""


def pod_endpoint_of(pod: JsonObject, *, node: JsonObject | None) -> PodEndpoint:
    """Return the endpoint of `pod` (as the API serves it) on `node` (None while the Node is unknown).

    A pod stands for an endpoint when it is meshed (label, namespace), has a valid IP, does not use the host's
    network, and has not finished. Its service key is `<namespace>/<serviceAccount>`; port, ports, weight,
    protocol and health-check mode come from its `endpoint.aether.io/*` annotations (invalid ones keep their
    defaults, reported in `problems`).
    Health: a terminating pod is DRAINING; a running pod whose Ready condition is True is HEALTHY; any other
    pod with an IP (pending, or running but not ready) is UNHEALTHY.
    Locality: the Node's `topology.kubernetes.io/region` and `zone` labels; `node_ip` its InternalIP.
    """
    try:
        (added,) = object_events(pod, source="kubernetes", observed_at=0)
    except (ObjectError, ValueError) as error:
        return PodEndpoint(endpoint=None, problems=(str(error),))
    assert isinstance(added, PodAdded), "a Pod object converts to PodAdded (a bug otherwise)"
    spec = _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    phase = str(status.get("phase") or "")
    reason = (
        admit_pod(added.pod).message  # "" when the mesh takes the pod
        or (
            f"pod {added.pod.key!r}: uses the host's network, so it is not meshed"
            if spec.get("hostNetwork")
            else None
        )
        or (
            f"pod {added.pod.key!r}: {phase.lower()}, so it serves nothing"
            if phase in ("Succeeded", "Failed")
            else None
        )
    )
    if reason is not None:
        return PodEndpoint(endpoint=None, problems=(reason,))
    config, problems = parse_pod_config(added.pod)
    region, zone, node_ip = _locality(node)
    endpoint = attrs.evolve(
        pod_endpoint(PodRecord(pod=added.pod, config=config)),
        health=_health(pod, phase=phase, status=status),
        region=region,
        zone=zone,
        node_ip=node_ip,
    )
    return PodEndpoint(
        endpoint=endpoint, problems=tuple(f"pod {added.pod.key!r}: {problem}" for problem in problems)
    )


def _health(pod: JsonObject, *, phase: str, status: Mapping[str, Any]) -> Health:
    if _mapping(pod.get("metadata")).get("deletionTimestamp"):
        return Health.DRAINING
    conditions = status.get("conditions") or ()
    ready = any(
        isinstance(condition, dict) and condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in (conditions if isinstance(conditions, list) else ())
    )
    return Health.HEALTHY if phase == "Running" and ready else Health.UNHEALTHY


def _locality(node: JsonObject | None) -> tuple[str, str, str]:
    """Return the node's region, zone and InternalIP (empty while the node is unknown)."""
    if node is None:
        return "", "", ""
    labels = _mapping(_mapping(node.get("metadata")).get("labels"))
    addresses = _mapping(node.get("status")).get("addresses") or ()
    internal = next(
        (
            str(address.get("address") or "")
            for address in addresses
            if isinstance(address, dict) and address.get("type") == "InternalIP"
        ),
        "",
    )
    return str(labels.get(REGION_LABEL) or ""), str(labels.get(ZONE_LABEL) or ""), internal


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}
