"""Reducers of Kubernetes object events: Services, EndpointSlices, Namespaces, Gateway API objects, ReferenceGrants,
TLS Secrets and the MeshConfig."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import attrs
import immutables

from aether.core.events.base import Event
from aether.core.events.kube import (
    EndpointSliceDeleted,
    EndpointSliceUpserted,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    KubeEndpointSlice,
    KubeNamespace,
    KubeObject,
    KubeService,
    KubeServiceDeleted,
    KubeServiceUpserted,
    MeshConfigUpdated,
    NamespaceDeleted,
    NamespaceUpserted,
    ObjectMeta,
    ReferenceGrantDeleted,
    ReferenceGrantUpserted,
    TlsSecret,
    TlsSecretDeleted,
    TlsSecretUpserted,
)
from aether.core.reduce.common import applied, rejected
from aether.core.state.diagnostics import RejectionReason
from aether.core.state.kube import gateway_changed, slice_service
from aether.core.state.state import State
from aether.core.validation import (
    dns_label_problem,
    dns_subdomain_problem,
    object_name_problem,
    port_problem,
    trust_domain_problem,
)

GATEWAY_KINDS = frozenset(
    ("GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute", "UDPRoute")
)
"""The Gateway API kinds the mesh folds (ReferenceGrant has events of its own)."""


def canonical_json(value: object) -> str:
    """Return `value` as canonical JSON: sorted keys, no insignificant whitespace, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _meta_problem(meta: ObjectMeta) -> str | None:
    if meta.kind != "GatewayClass" and (problem := dns_label_problem(meta.namespace, what="namespace")):
        return problem
    return object_name_problem(meta.name, what="name")


MAX_SPEC_DEPTH = 64
"""The deepest nesting of arrays and objects a spec may have. Gateway API objects nest about ten levels; the bound
is checked before parsing so that no input can reach Python's recursion limit, whose reach depends on the caller's
stack depth (folding must not)."""


def _nesting_problem(text: str) -> str | None:
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_SPEC_DEPTH:
                return f"spec must nest at most {MAX_SPEC_DEPTH} levels of arrays and objects"
        elif char in "]}":
            depth -= 1
    return None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON (RFC 8259)")


def _spec_problem(item: KubeObject) -> str | None:
    problem = _nesting_problem(item.spec_json)
    if problem is not None:
        return problem
    try:
        spec = json.loads(item.spec_json, parse_constant=_reject_constant)
    except ValueError as exc:
        return f"spec must be JSON ({exc})"
    if not isinstance(spec, dict):
        return f"spec must be a JSON object (got {type(spec).__name__})"
    if canonical_json(spec) != item.spec_json:
        return "spec must be canonical JSON (sorted keys, no whitespace); the source must canonicalize it"
    return None


def _track(state: State, field: str, key: str, changes: dict[str, Any]) -> None:
    """Add the change of Gateway API object `key` to the state's chain (what the Gateway projector reads)."""
    if field == "gateway_objects":
        changes["gateway_changes"] = gateway_changed(state.kube.gateway_changes, key, changes[field])


def _upsert_object(
    state: State,
    event: Event,
    seq: int,
    *,
    item: KubeObject,
    field: str,
    kinds: frozenset[str],
) -> State:
    meta = item.meta
    objects: immutables.Map[str, KubeObject] = getattr(state.kube, field)
    if meta.kind not in kinds:
        message = f"{meta.key}: kind must be one of {sorted(kinds)!r} (got {meta.kind!r})"
        return rejected(state, event, seq, reason=RejectionReason.UNSUPPORTED_KIND, message=message)
    problem = _meta_problem(meta) or _spec_problem(item)
    if problem is not None:
        return rejected(
            state, event, seq, reason=RejectionReason.INVALID_SPEC, message=f"{meta.key}: {problem}"
        )
    known = objects.get(meta.key)
    if known is not None and known.meta.uid == meta.uid and meta.generation < known.meta.generation:
        message = (
            f"{meta.key}: generation {meta.generation!r} is older than the applied {known.meta.generation!r}"
        )
        return rejected(state, event, seq, reason=RejectionReason.STALE_OBJECT, message=message)
    changes: dict[str, Any] = {field: objects.set(meta.key, item)}
    _track(state, field, meta.key, changes)
    return applied(state, event, seq, kube=attrs.evolve(state.kube, **changes))


def _delete_object(state: State, event: Event, seq: int, *, meta: ObjectMeta, field: str) -> State:
    objects: immutables.Map[str, KubeObject | KubeService | TlsSecret | KubeNamespace | KubeEndpointSlice] = (
        getattr(state.kube, field)
    )
    known = objects.get(meta.key)
    if known is None:
        message = f"{meta.key} deleted but not known"
        return rejected(state, event, seq, reason=RejectionReason.UNKNOWN_OBJECT, message=message)
    known_uid = known.meta.uid
    if meta.uid and known_uid and meta.uid != known_uid:
        message = f"{meta.key} deleted with uid {meta.uid!r} but the known object has uid {known_uid!r}"
        return rejected(state, event, seq, reason=RejectionReason.STALE_OBJECT, message=message)
    changes: dict[str, Any] = {field: objects.delete(meta.key)}
    _track(state, field, meta.key, changes)
    return applied(state, event, seq, kube=attrs.evolve(state.kube, **changes))


def gateway_object_upserted(state: State, event: GatewayObjectUpserted, seq: int) -> State:
    """Store the Gateway API object; an unsupported kind, a bad spec or an older generation is a rejection."""
    return _upsert_object(state, event, seq, item=event.object, field="gateway_objects", kinds=GATEWAY_KINDS)


def gateway_object_deleted(state: State, event: GatewayObjectDeleted, seq: int) -> State:
    """Forget the Gateway API object."""
    return _delete_object(state, event, seq, meta=event.meta, field="gateway_objects")


def reference_grant_upserted(state: State, event: ReferenceGrantUpserted, seq: int) -> State:
    """Store the ReferenceGrant."""
    kinds = frozenset(("ReferenceGrant",))
    return _upsert_object(state, event, seq, item=event.object, field="reference_grants", kinds=kinds)


def reference_grant_deleted(state: State, event: ReferenceGrantDeleted, seq: int) -> State:
    """Forget the ReferenceGrant."""
    return _delete_object(state, event, seq, meta=event.meta, field="reference_grants")


def kube_service_upserted(state: State, event: KubeServiceUpserted, seq: int) -> State:
    """Store the Service; a bad name or port is a rejection and the previous version stays."""
    service = event.service
    meta = service.meta
    problem = _meta_problem(meta) or next(
        (p for p in (port_problem(port.port, what=f"port {port.name!r}") for port in service.ports) if p),
        None,
    )
    if meta.kind != "Service":
        problem = f"kind must be 'Service' (got {meta.kind!r})"
    if problem is not None:
        return rejected(
            state, event, seq, reason=RejectionReason.INVALID_SPEC, message=f"{meta.key}: {problem}"
        )
    kube = attrs.evolve(state.kube, services=state.kube.services.set(meta.key, service))
    return applied(state, event, seq, kube=kube)


def kube_service_deleted(state: State, event: KubeServiceDeleted, seq: int) -> State:
    """Forget the Service."""
    return _delete_object(state, event, seq, meta=event.meta, field="services")


def _tls_secret_problem(secret: TlsSecret) -> str | None:
    meta = secret.meta
    if meta.kind != "Secret":
        return f"kind must be 'Secret' (got {meta.kind!r})"
    problem = _meta_problem(meta)
    if problem is not None:
        return problem
    # The core never parses PEM (the edge Envoy does); it only requires both halves to be present.
    if not secret.cert_chain_pem:
        return "tls.crt must not be empty"
    if not secret.private_key.secret:
        return "tls.key must not be empty"
    return None


def tls_secret_upserted(state: State, event: TlsSecretUpserted, seq: int) -> State:
    """Store the TLS Secret; a bad name or an empty certificate or key is a rejection and the previous one stays."""
    secret = event.secret
    problem = _tls_secret_problem(secret)
    if problem is not None:
        return rejected(
            state, event, seq, reason=RejectionReason.INVALID_SPEC, message=f"{secret.meta.key}: {problem}"
        )
    kube = attrs.evolve(state.kube, tls_secrets=state.kube.tls_secrets.set(secret.meta.key, secret))
    return applied(state, event, seq, kube=kube)


def tls_secret_deleted(state: State, event: TlsSecretDeleted, seq: int) -> State:
    """Forget the TLS Secret."""
    return _delete_object(state, event, seq, meta=event.meta, field="tls_secrets")


def namespace_upserted(state: State, event: NamespaceUpserted, seq: int) -> State:
    """Store the Namespace's labels; a bad kind, a namespace on it or a name that is not a DNS label is a
    rejection and the previous labels stay."""
    meta = event.namespace.meta
    problem = (
        f"kind must be 'Namespace' (got {meta.kind!r})"
        if meta.kind != "Namespace"
        else f"a Namespace has no namespace (got {meta.namespace!r})"
        if meta.namespace
        else dns_label_problem(meta.name, what="name")
    )
    if problem is not None:
        return rejected(
            state, event, seq, reason=RejectionReason.INVALID_SPEC, message=f"{meta.key}: {problem}"
        )
    kube = attrs.evolve(state.kube, namespaces=state.kube.namespaces.set(meta.key, event.namespace))
    return applied(state, event, seq, kube=kube)


def namespace_deleted(state: State, event: NamespaceDeleted, seq: int) -> State:
    """Forget the Namespace's labels."""
    return _delete_object(state, event, seq, meta=event.meta, field="namespaces")


SLICE_ADDRESS_TYPES = {"IPv4": 4, "IPv6": 6}
"""The EndpointSlice address types the mesh routes to, with their IP version."""
SLICE_PROTOCOLS = frozenset(("TCP", "UDP", "SCTP"))
"""The port protocols the EndpointSlice API allows."""


def _slice_address_problem(address: str, *, version: int, where: str) -> str | None:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return f"{where}: {address!r} is not an IPv{version} address"
    if parsed.version != version:
        return (
            f"{where}: {address!r} is not an IPv{version} address (the slice's addressType is IPv{version})"
        )
    return None


def _slice_problem(item: KubeEndpointSlice) -> str | None:
    """Return why EndpointSlice `item` cannot be folded, naming the field and the fix; None when it can."""
    meta = item.meta
    if meta.kind != "EndpointSlice":
        return f"kind must be 'EndpointSlice' (got {meta.kind!r})"
    problem = _meta_problem(meta)
    if problem is None and item.service:
        problem = dns_label_problem(item.service, what="label kubernetes.io/service-name")
    if problem is not None:
        return problem
    version = SLICE_ADDRESS_TYPES.get(item.address_type)
    if version is None:
        if item.address_type == "FQDN":
            return "addressType FQDN is not routed (deprecated by Kubernetes): list IPv4 or IPv6 addresses instead"
        return f"addressType must be IPv4 or IPv6 (got {item.address_type!r})"
    names: set[str] = set()
    for index, port in enumerate(item.ports):
        where = f"ports[{index}]"
        if port.name in names:
            return f"{where}: name {port.name!r} appears twice (a Service port is served by one slice port)"
        names.add(port.name)
        if problem := port_problem(port.port, what=f"{where}.port"):
            return problem
        if port.protocol not in SLICE_PROTOCOLS:
            return f"{where}.protocol must be one of {sorted(SLICE_PROTOCOLS)!r} (got {port.protocol!r})"
    for index, endpoint in enumerate(item.endpoints):
        where = f"endpoints[{index}].addresses"
        if not endpoint.addresses:
            return f"{where} must hold at least one address"
        for address in endpoint.addresses:
            if problem := _slice_address_problem(address, version=version, where=where):
                return problem
    return None


def endpoint_slice_upserted(state: State, event: EndpointSliceUpserted, seq: int) -> State:
    """Store the EndpointSlice and index it under its Service; a bad kind, name, address type, port or address is a
    rejection and the previous version stays (O(1): one map entry and one index entry change)."""
    item = event.slice
    problem = _slice_problem(item)
    if problem is not None:
        return rejected(
            state, event, seq, reason=RejectionReason.INVALID_SPEC, message=f"{item.meta.key}: {problem}"
        )
    kube = state.kube
    key = item.meta.key
    known = kube.endpoint_slices.get(key)
    index = _unindex(kube.slices_by_service, known, key)
    if service := slice_service(item):
        index = index.set(service, index.get(service, frozenset()) | {key})
    kube = attrs.evolve(kube, endpoint_slices=kube.endpoint_slices.set(key, item), slices_by_service=index)
    return applied(state, event, seq, kube=kube)


def _unindex(
    index: immutables.Map[str, frozenset[str]], known: KubeEndpointSlice | None, key: str
) -> immutables.Map[str, frozenset[str]]:
    """Return `index` without slice `key` (whose stored version is `known`) under its Service."""
    service = slice_service(known) if known is not None else ""
    if not service:
        return index
    rest = index.get(service, frozenset()) - {key}
    return index.set(service, rest) if rest else index.delete(service)


def endpoint_slice_deleted(state: State, event: EndpointSliceDeleted, seq: int) -> State:
    """Forget the EndpointSlice and its index entry."""
    after = _delete_object(state, event, seq, meta=event.meta, field="endpoint_slices")
    known = state.kube.endpoint_slices.get(event.meta.key)
    if after.kube is state.kube or known is None:
        return after
    index = _unindex(state.kube.slices_by_service, known, event.meta.key)
    return attrs.evolve(after, kube=attrs.evolve(after.kube, slices_by_service=index))


def mesh_config_updated(state: State, event: MeshConfigUpdated, seq: int) -> State:
    """Adopt the MeshConfig; an invalid one is rejected and the one in force stays."""
    config = event.config
    problem = (
        dns_subdomain_problem(config.mesh_domain, what="mesh domain")
        or trust_domain_problem(config.trust_domain)
        or (
            None
            if config.on_demand_ttl_seconds > 0
            else f"on-demand ttl must be positive seconds (got {config.on_demand_ttl_seconds!r})"
        )
        or (
            None
            if 0 <= config.trace_sample_per_million <= 1_000_000
            else f"trace sample rate must be 0 to 1000000 per million (got {config.trace_sample_per_million!r})"
        )
    )
    current = state.kube.mesh_config.generation
    if problem is None and config.generation < current:
        problem = f"generation {config.generation!r} is older than the applied {current!r}"
    if problem is not None:
        return rejected(
            state, event, seq, reason=RejectionReason.INVALID_MESH_CONFIG, message=f"meshconfig: {problem}"
        )
    return applied(state, event, seq, kube=attrs.evolve(state.kube, mesh_config=config))
