"""References between Gateway API objects: a route's parentRefs and backendRefs, and a Gateway's certificateRefs."""

from __future__ import annotations

from typing import Any

import attrs

from aether.core.gateway.model.fields import (
    MemoizedByValue,
    SpecInvalid,
    field_integer,
    field_text,
    items,
    obj,
)

CORE_GROUP = ""
"""The Kubernetes core group (Service, Secret), spelled `""` in references."""
GATEWAY_GROUP = "gateway.networking.k8s.io"

MAX_PARENT_REFS = 32
MAX_WEIGHT = 1_000_000


@attrs.frozen(kw_only=True, cache_hash=True)
class ParentRef:
    """Where a route wants to attach: a Gateway (north-south, the edge) or a Service (east-west, GAMMA)."""

    group: str
    kind: str
    namespace: str
    """The parent's namespace (the route's own when the reference names none)."""
    name: str
    section_name: str = ""
    """A Gateway listener's name; empty for any."""
    port: int = 0
    """A Gateway listener's port or a Service port; 0 for any."""

    @property
    def is_service(self) -> bool:
        """True for a GAMMA parent: a core Service."""
        return self.group == CORE_GROUP and self.kind == "Service"

    @property
    def is_gateway(self) -> bool:
        """True for a Gateway parent."""
        return self.group == GATEWAY_GROUP and self.kind == "Gateway"


@attrs.frozen(kw_only=True, cache_hash=True)
class BackendRef:
    """A backend a route sends to (or mirrors to), with its weight."""

    group: str = CORE_GROUP
    kind: str = "Service"
    namespace: str
    """The backend's namespace (the route's own when the reference names none)."""
    name: str
    port: int = 0
    """The Service port; 0 when none was given (only non-Service kinds may omit it)."""
    weight: int = 1

    @property
    def is_service(self) -> bool:
        """True when the reference names a core Service, the only backend kind the mesh resolves."""
        return self.group == CORE_GROUP and self.kind == "Service"

    @property
    def key(self) -> str:
        """`<group>/<kind>/<namespace>/<name>`, for messages."""
        return f"{self.group or 'core'}/{self.kind}/{self.namespace}/{self.name}"


@MemoizedByValue
def parent_refs(value: Any, path: str, *, namespace: str) -> tuple[ParentRef, ...]:
    """Return a route's `parentRefs`; two references to one parent must differ in sectionName or port (CEL)."""
    refs: list[ParentRef] = []
    for index, raw in enumerate(items(value, path, max_items=MAX_PARENT_REFS)):
        where = f"{path}[{index}]"
        fields = obj(raw, where)
        refs.append(
            ParentRef(
                group=field_text(fields, "group", where, default=GATEWAY_GROUP),
                kind=field_text(fields, "kind", where, default="Gateway", max_length=63),
                namespace=field_text(fields, "namespace", where, default=namespace),
                name=field_text(fields, "name", where, min_length=1),
                section_name=field_text(fields, "sectionName", where, default=""),
                port=field_integer(fields, "port", where, low=1, high=65535, default=0),
            )
        )
    seen: set[tuple[str, str, str, str, str, int]] = set()
    for ref in refs:
        identity = (ref.group, ref.kind, ref.namespace, ref.name, ref.section_name, ref.port)
        if identity in seen:
            raise SpecInvalid(
                path,
                "sectionName or port must be specified when parentRefs includes 2 or more references to the same parent",
                value=ref.name,
            )
        seen.add(identity)
    return tuple(refs)


def backend_ref(value: Any, path: str, *, namespace: str, weighted: bool = True) -> BackendRef:
    """Return one backendRef (or a mirror's backendRef when not `weighted`).

    The CEL rule of the API: a reference to a core Service must give a port.
    """
    fields = obj(value, path)
    group = field_text(fields, "group", path, default=CORE_GROUP)
    kind = field_text(fields, "kind", path, default="Service", max_length=63)
    port = field_integer(fields, "port", path, low=1, high=65535, default=0)
    if group == CORE_GROUP and kind == "Service" and not port:
        raise SpecInvalid(f"{path}.port", "must be specified for a Service reference")
    return BackendRef(
        group=group,
        kind=kind,
        namespace=field_text(fields, "namespace", path, default=namespace),
        name=field_text(fields, "name", path, min_length=1),
        port=port,
        weight=field_integer(fields, "weight", path, low=0, high=MAX_WEIGHT, default=1) if weighted else 1,
    )


@MemoizedByValue  # a backendRef with filters is not flat: those are parsed each time
def backend_refs(value: Any, path: str, *, namespace: str, min_items: int = 0) -> tuple[BackendRef, ...]:
    """Return a rule's backendRefs (at most 16)."""
    return tuple(
        backend_ref(raw, f"{path}[{index}]", namespace=namespace)
        for index, raw in enumerate(items(value, path, max_items=16, min_items=min_items))
    )
