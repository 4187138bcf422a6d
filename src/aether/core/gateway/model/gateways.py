"""GatewayClass and Gateway (with its listeners), parsed from the spec JSON."""

from __future__ import annotations

import json
from typing import Any

import attrs

from aether.core.events.kube import ObjectMeta
from aether.core.gateway.model.fields import SpecInvalid, hostname, integer, items, obj, text, unique
from aether.core.gateway.model.refs import CORE_GROUP, GATEWAY_GROUP

PROTOCOLS = ("HTTP", "HTTPS", "TLS", "TCP", "UDP")
"""The listener protocols the edge serves; any other is refused with `UnsupportedProtocol`."""
DEFAULT_KINDS = {
    "HTTP": ("GRPCRoute", "HTTPRoute"),
    "HTTPS": ("GRPCRoute", "HTTPRoute"),
    "TLS": ("TLSRoute",),
    "TCP": ("TCPRoute",),
    "UDP": ("UDPRoute",),
}
"""The route kinds a listener of each protocol accepts when `allowedRoutes.kinds` names none."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label every namespace carries with its own name: the only namespace label the state knows."""


@attrs.frozen(kw_only=True)
class GatewayClass:
    """A GatewayClass: its controller decides whose Gateways these are."""

    meta: ObjectMeta
    controller_name: str


@attrs.frozen(kw_only=True)
class SecretRef:
    """A listener's certificateRef."""

    group: str
    kind: str
    namespace: str
    name: str


@attrs.frozen(kw_only=True)
class LabelRequirement:
    """One `matchExpressions` entry of a label selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class AllowedRoutes:
    """Which routes may attach to a listener."""

    namespaces: str = "Same"
    """`Same`, `All` or `Selector`."""
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelRequirement, ...] = ()
    kinds: tuple[tuple[str, str], ...] = ()
    """`(group, kind)` pairs given; empty: the protocol's defaults."""


@attrs.frozen(kw_only=True)
class Listener:
    """One listener of a Gateway."""

    name: str
    port: int
    protocol: str
    hostname: str = ""
    tls_mode: str = ""
    certificates: tuple[SecretRef, ...] = ()
    allowed: AllowedRoutes = AllowedRoutes()
    problem: str = ""
    """Why the listener cannot be served (`UnsupportedProtocol`); empty when it can."""


@attrs.frozen(kw_only=True)
class Gateway:
    """A Gateway: its class and listeners."""

    meta: ObjectMeta
    class_name: str
    listeners: tuple[Listener, ...]

    @property
    def age(self) -> tuple[str, str, str]:
        """Oldest first, then `<namespace>/<name>`: who keeps a port or hostname two Gateways both claim."""
        return (self.meta.creation_timestamp, self.meta.namespace, self.meta.name)


@attrs.frozen(kw_only=True)
class ObjectRejected:
    """A GatewayClass or Gateway the API's schema refuses."""

    meta: ObjectMeta
    reason: str
    message: str
    class_name: str = ""


def parse_gateway_class(meta: ObjectMeta, spec_json: str) -> GatewayClass | ObjectRejected:
    """Return the GatewayClass, or why the schema refuses it."""
    try:
        spec = obj(json.loads(spec_json), "spec")
        return GatewayClass(
            meta=meta, controller_name=text(spec.get("controllerName"), "spec.controllerName")
        )
    except SpecInvalid as error:
        return ObjectRejected(meta=meta, reason=error.reason, message=str(error))
    except ValueError as error:
        return ObjectRejected(meta=meta, reason="UnsupportedValue", message=f"spec: not JSON: {error}")


def _allowed(value: Any, path: str) -> AllowedRoutes:
    fields = obj(value, path)
    namespaces = obj(fields.get("namespaces"), f"{path}.namespaces")
    origin = text(
        namespaces.get("from"), f"{path}.namespaces.from", default="Same", choices=("All", "Same", "Selector")
    )
    selector = obj(namespaces.get("selector"), f"{path}.namespaces.selector")
    labels = obj(selector.get("matchLabels"), f"{path}.namespaces.selector.matchLabels")
    expressions = []
    for index, raw in enumerate(
        items(selector.get("matchExpressions"), f"{path}.namespaces.selector.matchExpressions", max_items=64)
    ):
        where = f"{path}.namespaces.selector.matchExpressions[{index}]"
        entry = obj(raw, where)
        values = items(entry.get("values"), f"{where}.values", max_items=256)
        expressions.append(
            LabelRequirement(
                key=text(entry.get("key"), f"{where}.key"),
                operator=text(
                    entry.get("operator"),
                    f"{where}.operator",
                    choices=("In", "NotIn", "Exists", "DoesNotExist"),
                ),
                values=tuple(text(item, f"{where}.values") for item in values),
            )
        )
    kinds = []
    for index, raw in enumerate(items(fields.get("kinds"), f"{path}.kinds", max_items=8)):
        entry = obj(raw, f"{path}.kinds[{index}]")
        kinds.append(
            (
                text(entry.get("group"), f"{path}.kinds[{index}].group", default=GATEWAY_GROUP),
                text(entry.get("kind"), f"{path}.kinds[{index}].kind", max_length=63),
            )
        )
    return AllowedRoutes(
        namespaces=origin,
        match_labels=tuple(
            sorted(
                (str(key), text(item, f"{path}.namespaces.selector.matchLabels"))
                for key, item in labels.items()
            )
        ),
        match_expressions=tuple(expressions),
        kinds=tuple(kinds),
    )


def _listener(value: Any, path: str, *, namespace: str) -> Listener:
    fields = obj(value, path)
    name = text(fields.get("name"), f"{path}.name", min_length=1)
    protocol = text(fields.get("protocol"), f"{path}.protocol", min_length=1, max_length=255)
    port = integer(fields.get("port"), f"{path}.port", low=1, high=65535)
    host = fields.get("hostname")
    if host is not None and protocol in ("TCP", "UDP"):
        raise SpecInvalid(path, "hostname must not be specified for protocols ['TCP', 'UDP']")
    tls = fields.get("tls")
    if tls is not None and protocol in ("HTTP", "TCP", "UDP"):
        raise SpecInvalid(path, "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']")
    if tls is None and protocol in ("HTTPS", "TLS"):
        raise SpecInvalid(path, "tls must be specified for protocols ['HTTPS', 'TLS']")
    tls_fields = obj(tls, f"{path}.tls")
    mode = ""
    certificates: list[SecretRef] = []
    if tls is not None:
        mode = text(
            tls_fields.get("mode"),
            f"{path}.tls.mode",
            default="Terminate",
            choices=("Terminate", "Passthrough"),
        )
        for index, raw in enumerate(
            items(tls_fields.get("certificateRefs"), f"{path}.tls.certificateRefs", max_items=64)
        ):
            where = f"{path}.tls.certificateRefs[{index}]"
            entry = obj(raw, where)
            certificates.append(
                SecretRef(
                    group=text(entry.get("group"), f"{where}.group", default=CORE_GROUP),
                    kind=text(entry.get("kind"), f"{where}.kind", default="Secret"),
                    namespace=text(entry.get("namespace"), f"{where}.namespace", default=namespace),
                    name=text(entry.get("name"), f"{where}.name", min_length=1),
                )
            )
        if mode == "Terminate" and not certificates:
            raise SpecInvalid(
                f"{path}.tls", "certificateRefs or options must be specified when mode is Terminate"
            )
        if mode == "Passthrough" and protocol == "HTTPS":
            raise SpecInvalid(f"{path}.tls.mode", "must be Terminate for protocol HTTPS", value=mode)
    problem = (
        ""
        if protocol in PROTOCOLS
        else f"protocol {protocol!r} is not supported (use one of {list(PROTOCOLS)})"
    )
    return Listener(
        name=name,
        port=port,
        protocol=protocol,
        hostname=hostname(host, f"{path}.hostname") if host is not None else "",
        tls_mode=mode,
        certificates=tuple(certificates),
        allowed=_allowed(fields.get("allowedRoutes"), f"{path}.allowedRoutes"),
        problem=problem,
    )


INVALID_PARAMETERS = "InvalidParameters"


def _check_parameters_ref(value: Any, path: str) -> None:
    """Check `spec.infrastructure`: its `parametersRef` cannot be resolved, since the edge reads no parameters
    resource, so naming one refuses the Gateway (the API: Accepted=False / InvalidParameters)."""
    fields = obj(value, path)
    if fields.get("parametersRef") is None:
        return
    where = f"{path}.parametersRef"
    ref = obj(fields["parametersRef"], where)
    group = text(ref.get("group"), f"{where}.group", default="")
    kind = text(ref.get("kind"), f"{where}.kind", min_length=1, max_length=63)
    name = text(ref.get("name"), f"{where}.name", min_length=1)
    raise SpecInvalid(
        where,
        f"{group or 'core'}/{kind} {name!r} cannot be resolved: the edge reads no infrastructure parameters "
        "(remove the reference)",
        reason=INVALID_PARAMETERS,
    )


def parse_gateway(meta: ObjectMeta, spec_json: str) -> Gateway | ObjectRejected:
    """Return the Gateway, or why the schema refuses it (listener names and port/protocol/hostname unique)."""
    class_name = ""
    try:
        spec = obj(json.loads(spec_json), "spec")
        class_name = text(spec.get("gatewayClassName"), "spec.gatewayClassName", min_length=1)
        listeners = tuple(
            _listener(raw, f"spec.listeners[{index}]", namespace=meta.namespace)
            for index, raw in enumerate(
                items(spec.get("listeners"), "spec.listeners", max_items=64, min_items=1)
            )
        )
        unique([item.name for item in listeners], "spec.listeners", what="Listener name")
        unique(
            [f"{item.port}/{item.protocol}/{item.hostname}" for item in listeners],
            "spec.listeners",
            what="Combination of port, protocol and hostname",
        )
        _check_parameters_ref(spec.get("infrastructure"), "spec.infrastructure")
        return Gateway(meta=meta, class_name=class_name, listeners=listeners)
    except SpecInvalid as error:
        return ObjectRejected(meta=meta, reason=error.reason, message=str(error), class_name=class_name)
    except ValueError as error:
        return ObjectRejected(meta=meta, reason="UnsupportedValue", message=f"spec: not JSON: {error}")
