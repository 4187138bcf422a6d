"""Whether the mesh admits a Gateway API route: the core's own parse, so a route the core would drop is denied with
the message its `Accepted` condition would carry.

The core refuses a route (`Accepted=False`) in three cases, and only these are denied: its spec breaks the API's
schema or CEL rules (`RouteRejected`: the condition's message), a backendRef has filters that cannot apply to one
backend (URLRewrite, RequestRedirect, RequestMirror: `Rule.backend_filter_refusals`), or none of its rules can be
served (each rule dropped for an expression Envoy refuses: the messages joined with `"; "`, as the core's status
joins them). A route with some rules dropped is
admitted with a warning, as the core keeps serving its other rules (its status says `PartiallyInvalid`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aether.controller.verdict import ALLOWED, Verdict
from aether.core.gateway.model import Route, parse_route
from aether.core.reduce.kube import canonical_json
from aether.kube.convert import ObjectError, object_meta

__all__ = ["ROUTE_KINDS_VALIDATED", "GatewayOwner", "every_gateway", "route_verdict"]

ROUTE_KINDS_VALIDATED = ("HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute")
"""The route kinds the validating webhook reviews."""


GatewayOwner = Callable[[str, str], bool]
"""Whether the Gateway `(namespace, name)` is one of ours (its GatewayClass names our controller)."""

GATEWAY_API_GROUP = "gateway.networking.k8s.io"


def every_gateway(namespace: str, name: str) -> bool:
    """The `GatewayOwner` that claims every Gateway (a webhook with no view of the cluster judges every route)."""
    del namespace, name
    return True


def _ours(spec: Mapping[str, Any], namespace: str, owns_gateway: GatewayOwner) -> bool:
    """Whether a route is ours to judge: a parentRef names a Service (GAMMA: the mesh is the one implementation of
    Service parents) or a Gateway of ours. Another implementation's routes are theirs to refuse; a parentRefs the
    API's schema would refuse is judged (the core's parse names the field)."""
    refs = spec.get("parentRefs")
    if not isinstance(refs, list):
        return refs is not None
    for ref in refs:
        if not isinstance(ref, Mapping):
            return True
        group, kind = ref.get("group", GATEWAY_API_GROUP), ref.get("kind", "Gateway")
        if kind == "Service" and group in ("", "core"):
            return True
        if (
            kind == "Gateway"
            and group == GATEWAY_API_GROUP
            and owns_gateway(str(ref.get("namespace") or namespace), str(ref.get("name") or ""))
        ):
            return True
    return False


def _dropped_rules(route: Route) -> list[str]:
    """The core's wording of each dropped rule (`aether.core.gateway.projector`'s resolution)."""
    return [f"spec.rules[{rule.index}] dropped: {rule.problem}" for rule in route.rules if rule.problem]


def route_verdict(
    kind: str, obj: Mapping[str, Any], *, owns_gateway: GatewayOwner = every_gateway
) -> Verdict:
    """Return the verdict on route `obj` of `kind` (one of `ROUTE_KINDS_VALIDATED`); a route none of whose parents
    is ours (a Service, or a Gateway `owns_gateway` claims) is admitted unjudged.

    A denial's message is the core's condition message exactly (`spec.rules[0] dropped: ...`): the API server
    already names the object and the webhook around it.
    """
    try:
        meta = object_meta(obj)
    except ObjectError as error:
        return Verdict(allowed=False, message=f"{kind}: {error}")
    where = f"{kind} {meta.namespace}/{meta.name}"
    if meta.kind != kind:
        return Verdict(allowed=False, message=f"{where}: kind must be {kind!r} (got {meta.kind!r})")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return Verdict(allowed=False, message=f"{where}: spec: must be an object (got {spec!r})")
    if not _ours(spec, meta.namespace, owns_gateway):
        return ALLOWED
    parsed = parse_route(kind, meta, canonical_json(dict(spec)))
    if not isinstance(parsed, Route):
        return Verdict(allowed=False, message=parsed.message)
    refused = [message for rule in parsed.rules for message in rule.backend_filter_refusals()]
    if refused:
        return Verdict(allowed=False, message="; ".join(refused))
    dropped = _dropped_rules(parsed)
    if dropped and len(dropped) == len(parsed.rules):
        return Verdict(allowed=False, message="; ".join(dropped))
    if dropped:
        return Verdict(allowed=True, warnings=tuple(dropped))
    return ALLOWED
