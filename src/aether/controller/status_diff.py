"""What to write to a Gateway API object's status: the core's computed status (`aether.core.gateway`'s
`ObjectStatus`) merged into the status the object has, or None when ours is already there.

Pure: the writer (`aether.controller.status_writer`) does the I/O. The Gateway API's rule for shared objects holds:
a route's `status.parents` entries whose `controllerName` is not ours belong to other controllers and are kept as
they are; ours are replaced whole. A condition keeps its `lastTransitionTime` while its status stays the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aether.core.gateway import (
    EDGE_CONTROLLER,
    MESH_CONTROLLER,
    Condition,
    ListenerStatus,
    ObjectStatus,
    ParentStatus,
)
from aether.kube.resources import GATEWAY_API_GROUP, JsonObject

__all__ = ["OUR_CONTROLLERS", "ROUTE_KINDS", "SUPPORTED_FEATURES", "gateway_addresses", "status_update"]

OUR_CONTROLLERS = frozenset({EDGE_CONTROLLER, MESH_CONTROLLER})
"""The controllerNames whose route parent entries this controller owns."""

ROUTE_KINDS = frozenset({"HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute", "UDPRoute"})

SUPPORTED_FEATURES: tuple[str, ...] = (
    "GRPCRoute",
    "Gateway",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "HTTPRoute",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteResponseHeaderModification",
    "ReferenceGrant",
    "TLSRoute",
    "UDPRoute",
)
"""The Gateway API features (v1.2 names, sorted as the API requires) the edge's GatewayClass reports in
`status.supportedFeatures`: the core features and the extended ones the edge projection implements."""


def status_update(
    observed: JsonObject,
    computed: ObjectStatus | None,
    *,
    now: str,
    addresses: Sequence[Mapping[str, str]] = (),
) -> JsonObject | None:
    """Return the whole `status` to write to `observed`, or None when nothing of ours would change.

    Args:
        observed: The object as last read (its `status` is what is there now).
        computed: The core's status of the object; None when the core computed none (not ours, or a route
            attached to none of our parents: its entries of ours, if any, go).
        now: The `lastTransitionTime` of a condition whose status changes (RFC 3339, UTC).
        addresses: A Gateway's `status.addresses` (`{"type": "IPAddress" | "Hostname", "value": ...}`): where
            the edge that serves it is reached (`gateway_addresses`); none yet leaves the field out.
    """
    kind = observed.get("kind")
    status: JsonObject = dict(observed.get("status") or {})
    if kind in ROUTE_KINDS:
        return _route_update(status, () if computed is None else computed.parents, now=now)
    if computed is None or kind not in ("GatewayClass", "Gateway"):
        return None
    wanted = dict(status)
    wanted["conditions"] = _conditions(computed.conditions, status.get("conditions"), now=now)
    if kind == "GatewayClass":
        wanted["supportedFeatures"] = [{"name": feature} for feature in SUPPORTED_FEATURES]
    else:
        observed_listeners = {
            item.get("name"): item for item in status.get("listeners") or () if isinstance(item, dict)
        }
        wanted["listeners"] = [
            _listener(item, observed_listeners.get(item.name), now=now) for item in computed.listeners
        ]
        if addresses:
            wanted["addresses"] = [dict(address) for address in addresses]
        else:
            wanted.pop("addresses", None)
    return None if _comparable(wanted) == _comparable(status) else wanted


def _route_update(status: JsonObject, parents: Sequence[ParentStatus], *, now: str) -> JsonObject | None:
    entries = [item for item in status.get("parents") or () if isinstance(item, dict)]
    theirs = [item for item in entries if item.get("controllerName") not in OUR_CONTROLLERS]
    ours = [item for item in entries if item.get("controllerName") in OUR_CONTROLLERS]
    by_ref = {_ref_key(item.get("parentRef")): item for item in ours}
    wanted = [_parent(parent, by_ref.get(_ref_key(_parent_ref(parent))), now=now) for parent in parents]
    if _comparable(wanted) == _comparable(ours):
        return None
    return {**status, "parents": [*theirs, *wanted]}


def _parent_ref(parent: ParentStatus) -> JsonObject:
    ref: JsonObject = {
        "group": parent.group,
        "kind": parent.kind,
        "namespace": parent.namespace,
        "name": parent.name,
    }
    if parent.section_name:
        ref["sectionName"] = parent.section_name
    if parent.port:
        ref["port"] = parent.port
    return ref


def _ref_key(ref: Any) -> tuple[object, ...]:
    ref = ref if isinstance(ref, dict) else {}
    # The API server defaults a parentRef's group to the Gateway API's and its kind to Gateway.
    return (
        ref.get("group", GATEWAY_API_GROUP),
        ref.get("kind", "Gateway"),
        ref.get("namespace"),
        ref.get("name"),
        ref.get("sectionName") or "",
        ref.get("port") or 0,
    )


def _parent(parent: ParentStatus, observed: JsonObject | None, *, now: str) -> JsonObject:
    return {
        "parentRef": _parent_ref(parent),
        "controllerName": parent.controller_name,
        "conditions": _conditions(parent.conditions, (observed or {}).get("conditions"), now=now),
    }


def _listener(listener: ListenerStatus, observed: JsonObject | None, *, now: str) -> JsonObject:
    return {
        "name": listener.name,
        "supportedKinds": [{"group": GATEWAY_API_GROUP, "kind": kind} for kind in listener.supported_kinds],
        "attachedRoutes": listener.attached_routes,
        "conditions": _conditions(listener.conditions, (observed or {}).get("conditions"), now=now),
    }


def _conditions(conditions: Iterable[Condition], observed: Any, *, now: str) -> list[JsonObject]:
    """metav1.Conditions of `conditions`, each keeping its observed `lastTransitionTime` if its status is unchanged."""
    before: Mapping[object, Any] = {
        item.get("type"): item for item in observed or () if isinstance(item, dict)
    }
    written = []
    for item in conditions:
        previous = before.get(item.type) or {}
        same = previous.get("status") == item.status and previous.get("lastTransitionTime")
        written.append(
            {
                "type": item.type,
                "status": item.status,
                "reason": item.reason,
                "message": item.message,
                "observedGeneration": item.observed_generation,
                "lastTransitionTime": previous["lastTransitionTime"] if same else now,
            }
        )
    return written


def _comparable(value: Any) -> Any:
    """`value` without the transition times: what decides whether a write changes anything."""
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items() if key != "lastTransitionTime"}
    if isinstance(value, list | tuple):
        return [_comparable(item) for item in value]
    return value


def gateway_addresses(service: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """The `status.addresses` of our Gateways: the load-balancer ingress of the edge's Service (`aether-edge`, type
    LoadBalancer), IPs as `IPAddress` and names as `Hostname`, in the order the load balancer lists them, each
    once; empty while the load balancer has assigned none (or for no Service)."""
    status = (service or {}).get("status")
    balancer = status.get("loadBalancer") if isinstance(status, Mapping) else None
    ingress = balancer.get("ingress") if isinstance(balancer, Mapping) else None
    found: list[dict[str, str]] = []
    for entry in ingress if isinstance(ingress, list) else ():
        if not isinstance(entry, Mapping):
            continue
        for field, kind in (("ip", "IPAddress"), ("hostname", "Hostname")):
            value = entry.get(field)
            address = {"type": kind, "value": value} if isinstance(value, str) and value else None
            if address is not None and address not in found:
                found.append(address)
    return found
