"""The one converter from Kubernetes objects (decoded JSON or YAML) to the log's events.

Every source of Kubernetes objects uses it: the API watches, the manifest directory of `aether render` and of
`aether demo`. An object of a kind the mesh does not read (a Deployment, an Opaque Secret) converts to no event;
something that is not a Kubernetes object at all raises `ObjectError`, which names the field at fault.

Upserts carry what was observed and nothing more: judging it (a bad name, a spec the Gateway API forbids) is the
reducers' and projections' job, so that a replay explains every rejection.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from aether.core.events import (
    SERVICE_NAME_LABEL,
    EndpointSliceDeleted,
    EndpointSliceUpserted,
    Event,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    KubeEndpointSlice,
    KubeNamespace,
    KubeObject,
    KubeService,
    KubeServiceDeleted,
    KubeServiceUpserted,
    NamespaceDeleted,
    NamespaceUpserted,
    ObjectMeta,
    Pod,
    PodAdded,
    PodRemoved,
    PodUpdated,
    ReferenceGrantDeleted,
    ReferenceGrantUpserted,
    ServicePort,
    SliceEndpoint,
    SlicePort,
    TlsSecret,
    TlsSecretDeleted,
    TlsSecretUpserted,
)
from aether.core.gateway.model.gateways import NAMESPACE_NAME_LABEL
from aether.core.reduce.kube import GATEWAY_KINDS, canonical_json
from aether.core.values import Redacted
from aether.kube.errors import KubeError
from aether.kube.resources import DISCOVERY_GROUP, GATEWAY_API_GROUP

__all__ = ["DEFAULT_NAMESPACE", "ObjectError", "deletion_events", "object_events", "object_meta"]

DEFAULT_NAMESPACE = "default"
"""The namespace of a namespaced object that names none (what `kubectl apply` does with a manifest)."""

TLS_SECRET_TYPE = "kubernetes.io/tls"
_CLUSTER_SCOPED = frozenset(("GatewayClass", "Namespace"))
"""Kinds read here that have no namespace."""


class ObjectError(KubeError, ValueError):
    """`value` is not a Kubernetes object the mesh can read: `field` must be `rule`."""

    def __init__(self, field: str, *, rule: str, value: object) -> None:
        super().__init__(field, rule, value)
        self.field = field
        """The field's path in the object, as in `metadata.name`; empty for the object itself."""
        self.rule = rule
        self.value = value

    def __str__(self) -> str:
        subject = self.field or "object"
        return f"not a kubernetes object: {subject} must be {self.rule} (got {_short(self.value)})"


def _short(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 256:  # repr of a huge integer is slow, or refused
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


# --- reading fields ---


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(field, rule="a mapping", value=value)
    return value


def _list(value: object, field: str) -> list[Any] | tuple[Any, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ObjectError(field, rule="a list", value=value)
    return value


def _string(value: object, field: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ObjectError(field, rule="a non-empty string" if required else "a string", value=value)
    return value


MAX_GENERATION = 2**63 - 1
"""`metadata.generation` is an int64 in the API and in the log; a count that large is not a generation."""
MAX_SERVICE_PORT = 2**32 - 1
"""A Service port is a uint32 in the log: beyond that no event can carry it (1..65535 is the reducer's rule, so a
port 0 or 70000 still reaches the log as an upsert it rejects, and the rejection explains it)."""


def _integer(value: object, field: str, *, high: int) -> int:
    """Return integer `value` (0 when absent), which must lie in 0..`high`: what the log's field can carry.

    An event holding more could not be written: the object is refused here, naming the field, so it never
    reaches the log.
    """
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ObjectError(field, rule="an integer", value=value)
    if not 0 <= value <= high:
        raise ObjectError(field, rule=f"an integer from 0 to {high}", value=value)
    return value


def _string_map(value: object, field: str) -> dict[str, str]:
    mapping = _mapping(value, field)
    for key, item in mapping.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ObjectError(f"{field}.{key}", rule="a string (quote it in YAML)", value=item)
    return dict(mapping)


def _kind_and_group(obj: object) -> tuple[str, str]:
    if not isinstance(obj, Mapping):
        raise ObjectError("", rule="a mapping with apiVersion, kind and metadata", value=obj)
    api_version = _string(obj.get("apiVersion"), "apiVersion", required=True)
    kind = _string(obj.get("kind"), "kind", required=True)
    group = api_version.rpartition("/")[0]
    return kind, group


def object_meta(obj: Mapping[str, Any]) -> ObjectMeta:
    """Return the identifying metadata of Kubernetes object `obj` (its key is what sources diff on).

    A namespaced object without a namespace is in `DEFAULT_NAMESPACE`.

    Raises:
        ObjectError: `obj` has no apiVersion, kind or metadata.name, or one of them is of the wrong type.
    """
    kind, _ = _kind_and_group(obj)
    metadata = _mapping(obj.get("metadata"), "metadata")
    name = _string(metadata.get("name"), "metadata.name", required=True)
    namespace = _string(metadata.get("namespace"), "metadata.namespace")
    if kind not in _CLUSTER_SCOPED and not namespace:
        namespace = DEFAULT_NAMESPACE
    return ObjectMeta(
        kind=kind,
        namespace=namespace,
        name=name,
        uid=_string(metadata.get("uid"), "metadata.uid"),
        generation=_integer(metadata.get("generation"), "metadata.generation", high=MAX_GENERATION),
        resource_version=_string(metadata.get("resourceVersion"), "metadata.resourceVersion"),
        creation_timestamp=_string(metadata.get("creationTimestamp"), "metadata.creationTimestamp"),
    )


# --- the kinds ---


def _pod(obj: Mapping[str, Any], meta: ObjectMeta) -> Pod:
    metadata = _mapping(obj.get("metadata"), "metadata")
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    ips = [
        _string(_mapping(item, "status.podIPs[]").get("ip"), "status.podIPs[].ip", required=True)
        for item in _list(status.get("podIPs"), "status.podIPs")
    ]
    primary = _string(status.get("podIP"), "status.podIP")
    if primary and primary not in ips:
        ips.insert(0, primary)
    return Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        node_name=_string(spec.get("nodeName"), "spec.nodeName"),
        service_account=_string(spec.get("serviceAccountName"), "spec.serviceAccountName") or "default",
        labels=_string_map(metadata.get("labels"), "metadata.labels"),
        annotations=_string_map(metadata.get("annotations"), "metadata.annotations"),
        ips=tuple(ips),
    )


def _service_port(item: object) -> ServicePort:
    port = _mapping(item, "spec.ports[]")
    target = port.get("targetPort")
    if isinstance(target, int) and not isinstance(target, bool):
        target = _integer(target, "spec.ports[].targetPort", high=MAX_SERVICE_PORT)
    return ServicePort(
        name=_string(port.get("name"), "spec.ports[].name"),
        port=_integer(port.get("port"), "spec.ports[].port", high=MAX_SERVICE_PORT),
        target_port="" if target is None else str(target),
        protocol=_string(port.get("protocol"), "spec.ports[].protocol") or "TCP",
        app_protocol=_string(port.get("appProtocol"), "spec.ports[].appProtocol"),
    )


def _service(obj: Mapping[str, Any], meta: ObjectMeta) -> KubeService:
    spec = _mapping(obj.get("spec"), "spec")
    ports = _list(spec.get("ports"), "spec.ports")
    return KubeService(
        meta=meta,
        selector=_string_map(spec.get("selector"), "spec.selector"),
        ports=tuple(_service_port(item) for item in ports),
        cluster_ip=_string(spec.get("clusterIP"), "spec.clusterIP"),
    )


def _namespace(obj: Mapping[str, Any], meta: ObjectMeta) -> KubeNamespace:
    metadata = _mapping(obj.get("metadata"), "metadata")
    # The API server labels every Namespace with its name; a manifest may leave it out, so it is added here.
    labels = {NAMESPACE_NAME_LABEL: meta.name, **_string_map(metadata.get("labels"), "metadata.labels")}
    return KubeNamespace(meta=meta, labels=labels)


def _slice_port(item: object) -> SlicePort:
    port = _mapping(item, "ports[]")
    return SlicePort(
        name=_string(port.get("name"), "ports[].name"),
        port=_integer(port.get("port"), "ports[].port", high=MAX_SERVICE_PORT),
        protocol=_string(port.get("protocol"), "ports[].protocol") or "TCP",
        app_protocol=_string(port.get("appProtocol"), "ports[].appProtocol"),
    )


def _slice_endpoint(item: object) -> SliceEndpoint:
    endpoint = _mapping(item, "endpoints[]")
    ready = _mapping(endpoint.get("conditions"), "endpoints[].conditions").get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise ObjectError("endpoints[].conditions.ready", rule="a boolean", value=ready)
    addresses = _list(endpoint.get("addresses"), "endpoints[].addresses")
    return SliceEndpoint(
        addresses=tuple(_string(address, "endpoints[].addresses[]") for address in addresses),
        # The API reads an unknown (absent) readiness as ready.
        ready=ready is not False,
    )


def _endpoint_slice(obj: Mapping[str, Any], meta: ObjectMeta) -> KubeEndpointSlice:
    labels = _string_map(_mapping(obj.get("metadata"), "metadata").get("labels"), "metadata.labels")
    return KubeEndpointSlice(
        meta=meta,
        service=labels.get(SERVICE_NAME_LABEL, ""),
        address_type=_string(obj.get("addressType"), "addressType", required=True),
        ports=tuple(_slice_port(item) for item in _list(obj.get("ports"), "ports")),
        endpoints=tuple(_slice_endpoint(item) for item in _list(obj.get("endpoints"), "endpoints")),
    )


def _slice_event(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str, known: bool) -> Event:
    return EndpointSliceUpserted(observed_at=at, source=source, slice=_endpoint_slice(obj, meta))


def _spec_object(obj: Mapping[str, Any], meta: ObjectMeta) -> KubeObject:
    return KubeObject(meta=meta, spec_json=canonical_json(dict(_mapping(obj.get("spec"), "spec"))))


def _secret_entry(obj: Mapping[str, Any], key: str) -> bytes:
    """Return entry `key` of a Secret: `stringData` (what manifests may write) wins over base64 `data`."""
    plain = _mapping(obj.get("stringData"), "stringData").get(key)
    if plain is not None:
        return _string(plain, f"stringData.{key}").encode()
    encoded = _string(_mapping(obj.get("data"), "data").get(key), f"data.{key}")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ObjectError(f"data.{key}", rule="base64", value=encoded) from exc


def _tls_secret(obj: Mapping[str, Any], meta: ObjectMeta) -> TlsSecret:
    return TlsSecret(
        meta=meta,
        cert_chain_pem=_secret_entry(obj, "tls.crt"),
        private_key=Redacted(_secret_entry(obj, "tls.key")),
    )


_Convert = Callable[..., Event]
"""`convert(obj, meta, *, at, source, known)`: the upsert event of one family."""


def _pod_event(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str, known: bool) -> Event:
    cls = PodUpdated if known else PodAdded
    return cls(observed_at=at, source=source, pod=_pod(obj, meta))


def _service_event(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str, known: bool) -> Event:
    return KubeServiceUpserted(observed_at=at, source=source, service=_service(obj, meta))


def _namespace_event(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str, known: bool) -> Event:
    return NamespaceUpserted(observed_at=at, source=source, namespace=_namespace(obj, meta))


def _gateway_event(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str, known: bool) -> Event:
    return GatewayObjectUpserted(observed_at=at, source=source, object=_spec_object(obj, meta))


def _grant_event(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str, known: bool) -> Event:
    return ReferenceGrantUpserted(observed_at=at, source=source, object=_spec_object(obj, meta))


def _secret_event(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str, known: bool) -> Event:
    return TlsSecretUpserted(observed_at=at, source=source, secret=_tls_secret(obj, meta))


def _deleted(obj: Mapping[str, Any], meta: ObjectMeta, *, at: int, source: str) -> Event | None:
    match _family(obj, meta):
        case "Pod":
            return PodRemoved(
                observed_at=at, source=source, namespace=meta.namespace, name=meta.name, uid=meta.uid
            )
        case "Service":
            return KubeServiceDeleted(observed_at=at, source=source, meta=meta)
        case "Namespace":
            return NamespaceDeleted(observed_at=at, source=source, meta=meta)
        case "EndpointSlice":
            return EndpointSliceDeleted(observed_at=at, source=source, meta=meta)
        case "Gateway":
            return GatewayObjectDeleted(observed_at=at, source=source, meta=meta)
        case "ReferenceGrant":
            return ReferenceGrantDeleted(observed_at=at, source=source, meta=meta)
        case "TlsSecret":
            return TlsSecretDeleted(observed_at=at, source=source, meta=meta)
    return None


_UPSERTS: Mapping[str, _Convert] = {
    "Pod": _pod_event,
    "Service": _service_event,
    "Namespace": _namespace_event,
    "EndpointSlice": _slice_event,
    "Gateway": _gateway_event,
    "ReferenceGrant": _grant_event,
    "TlsSecret": _secret_event,
}
"""One row per family of objects the mesh reads (see `_family`)."""


def _family(obj: Mapping[str, Any], meta: ObjectMeta) -> str | None:
    """Which row of `_UPSERTS` reads `obj`, or None when the mesh does not read its kind."""
    _, group = _kind_and_group(obj)
    if group == "":
        if meta.kind == "Secret":
            secret_type = _string(obj.get("type"), "type")
            return "TlsSecret" if secret_type == TLS_SECRET_TYPE else None
        return meta.kind if meta.kind in ("Pod", "Service", "Namespace") else None
    if group == DISCOVERY_GROUP:
        return "EndpointSlice" if meta.kind == "EndpointSlice" else None
    if group == GATEWAY_API_GROUP:
        if meta.kind in GATEWAY_KINDS:
            return "Gateway"
        if meta.kind == "ReferenceGrant":
            return "ReferenceGrant"
    return None


def object_events(
    obj: Mapping[str, Any], *, source: str, observed_at: int, known: bool = False
) -> tuple[Event, ...]:
    """Return the events of Kubernetes object `obj` being created or changed.

    Args:
        obj: The object as the API serves it (or a manifest document): apiVersion, kind, metadata and the rest.
        source: The event source (`kubernetes`, `directory`, ...).
        observed_at: When it was observed, in nanoseconds since the Unix epoch.
        known: True when the source saw the object before (a pod then changes with `PodUpdated`, not
            `PodAdded`; both upsert, the kind records what the source saw).

    Returns:
        One upsert event for a Pod, a Service, an EndpointSlice, a Namespace, a Gateway API object, a ReferenceGrant or a
        `kubernetes.io/tls` Secret; none for any other kind.

    Raises:
        ObjectError: `obj` is not a Kubernetes object, or a field the mesh reads has the wrong type.
    """
    meta = object_meta(obj)
    family = _family(obj, meta)
    if family is None:
        return ()
    return (_UPSERTS[family](obj, meta, at=observed_at, source=source, known=known),)


def deletion_events(obj: Mapping[str, Any], *, source: str, observed_at: int) -> tuple[Event, ...]:
    """Return the events of Kubernetes object `obj` (its last observed state) being deleted.

    Returns:
        One deletion event carrying the object's key and uid, or none for a kind the mesh does not read.

    Raises:
        ObjectError: `obj` is not a Kubernetes object.
    """
    event = _deleted(obj, object_meta(obj), at=observed_at, source=source)
    return () if event is None else (event,)
