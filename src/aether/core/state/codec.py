"""The state's protobuf form (`aether.log.v1.State`): what a checkpoint stores and what the digest hashes.

Every collection is written in the order `aether.core.order` decides, so equal states give equal bytes.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable
from typing import Any

import immutables
from google.protobuf.message import DecodeError

from aether.core.errors import CodecError
from aether.core.events.batch import decode_state_endpoints
from aether.core.events.identity import Svid, TrustBundle
from aether.core.events.kube import (
    KubeEndpointSlice,
    KubeNamespace,
    KubeObject,
    KubeService,
    MeshConfig,
    TlsSecret,
)
from aether.core.events.registry import Endpoint
from aether.core.events.wire import DecodedColumns, plan_for
from aether.core.order import sorted_values
from aether.core.state.diagnostics import Diagnostics, Rejection
from aether.core.state.feedback import FeedbackState, OnDemandRequest, XdsFeedback
from aether.core.state.identity import IdentityState
from aether.core.state.kube import KubeState, index_slices
from aether.core.state.pods import PodRecord
from aether.core.state.registry import RegistryState, ServiceEndpoints
from aether.core.state.state import State
from aether.proto.log.v1 import log_pb2


def _write(values: Iterable[Any], target: Any) -> None:
    for value in values:
        plan_for(type(value)).encode_into(value, target.add())


def _read(cls: type[Any], messages: Iterable[Any]) -> list[Any]:
    plan = plan_for(cls)
    return [plan.decode(message) for message in messages]


def state_to_proto(state: State) -> log_pb2.State:
    """Return `state` as an `aether.log.v1.State` message, every list in a defined order."""
    message = log_pb2.State(seq=state.seq, rejected_total=state.diagnostics.rejected_total)
    _write(sorted_values(state.pods), message.pods)
    message.captured_nodes.extend(sorted(state.captured_nodes))
    registry = state.registry
    message.registry.SetInParent()
    message.registry.version = registry.version
    message.registry.synced = registry.synced
    message.registry.services.extend(sorted(registry.services))
    for service in sorted(registry.endpoints):
        _write(sorted_values(registry.endpoints[service]), message.registry.endpoints)
    _write(sorted_values(state.kube.services), message.services)
    _write(sorted_values(state.kube.gateway_objects), message.gateway_objects)
    _write(sorted_values(state.kube.reference_grants), message.reference_grants)
    _write(sorted_values(state.kube.tls_secrets), message.tls_secrets)
    _write(sorted_values(state.kube.namespaces), message.namespaces)
    _write(sorted_values(state.kube.endpoint_slices), message.endpoint_slices)
    plan_for(MeshConfig).encode_into(state.kube.mesh_config, message.mesh_config)
    _write(sorted_values(state.identity.svids), message.svids)
    _write(sorted_values(state.identity.trust_bundles), message.trust_bundles)
    _write(sorted_values(state.feedback.streams), message.xds_feedback)
    _write(sorted_values(state.feedback.on_demand), message.on_demand)
    _write(sorted_values(state.diagnostics.rejections), message.rejections)
    return message


def state_from_proto(message: log_pb2.State) -> State:
    """Return the state an `aether.log.v1.State` message holds."""
    endpoints: dict[str, dict[Any, Endpoint]] = {}
    for endpoint in _read(Endpoint, message.registry.endpoints):
        endpoints.setdefault(endpoint.service, {})[(endpoint.protocol, endpoint.ip)] = endpoint
    return _state_from_proto(
        message,
        endpoints=immutables.Map((service, immutables.Map(items)) for service, items in endpoints.items()),
    )


def _grouped(decoded: DecodedColumns) -> immutables.Map[str, ServiceEndpoints]:
    """Return endpoints decoded as columns by service, then by `(protocol, ip)`, as `state_from_proto` keys them (a
    later endpoint of the same key replaces an earlier one); runs of one service are keyed at once."""
    endpoints, fields = decoded.values, decoded.fields
    keys = list(zip(fields["protocol"], fields["ip"], strict=True))
    by_service: dict[str, ServiceEndpoints] = {}
    start = 0
    for service, run in itertools.groupby(fields["service"]):
        end = start + len(list(run))
        items = zip(keys[start:end], endpoints[start:end], strict=True)
        held = by_service.get(service)
        by_service[service] = immutables.Map(items) if held is None else held.update(items)
        start = end
    return immutables.Map(by_service)


def _state_from_proto(message: log_pb2.State, *, endpoints: immutables.Map[str, ServiceEndpoints]) -> State:
    registry = RegistryState(
        version=message.registry.version,
        synced=message.registry.synced,
        services=immutables.Map((service, True) for service in message.registry.services),
        endpoints=endpoints,
    )
    pods: list[PodRecord] = _read(PodRecord, message.pods)
    services: list[KubeService] = _read(KubeService, message.services)
    gateway_objects: list[KubeObject] = _read(KubeObject, message.gateway_objects)
    reference_grants: list[KubeObject] = _read(KubeObject, message.reference_grants)
    tls_secrets: list[TlsSecret] = _read(TlsSecret, message.tls_secrets)
    namespaces: list[KubeNamespace] = _read(KubeNamespace, message.namespaces)
    slice_list: list[KubeEndpointSlice] = _read(KubeEndpointSlice, message.endpoint_slices)
    slices = immutables.Map((item.meta.key, item) for item in slice_list)
    svids: list[Svid] = _read(Svid, message.svids)
    bundles: list[TrustBundle] = _read(TrustBundle, message.trust_bundles)
    streams: list[XdsFeedback] = _read(XdsFeedback, message.xds_feedback)
    on_demand: list[OnDemandRequest] = _read(OnDemandRequest, message.on_demand)
    rejections: list[Rejection] = _read(Rejection, message.rejections)
    return State(
        seq=message.seq,
        pods=immutables.Map((record.pod.key, record) for record in pods),
        captured_nodes=frozenset(message.captured_nodes),
        registry=registry,
        kube=KubeState(
            services=immutables.Map((service.meta.key, service) for service in services),
            gateway_objects=immutables.Map((item.meta.key, item) for item in gateway_objects),
            reference_grants=immutables.Map((item.meta.key, item) for item in reference_grants),
            tls_secrets=immutables.Map((item.meta.key, item) for item in tls_secrets),
            mesh_config=plan_for(MeshConfig).decode(message.mesh_config),
            namespaces=immutables.Map((item.meta.key, item) for item in namespaces),
            endpoint_slices=slices,
            slices_by_service=index_slices(slices),
        ),
        identity=IdentityState(
            svids=immutables.Map((svid.spiffe_id, svid) for svid in svids),
            trust_bundles=immutables.Map((bundle.trust_domain, bundle) for bundle in bundles),
        ),
        feedback=FeedbackState(
            streams=immutables.Map(((item.node_id, item.type_url), item) for item in streams),
            on_demand=immutables.Map(((item.node_id, item.cluster_name), item) for item in on_demand),
        ),
        diagnostics=Diagnostics(
            rejections=immutables.Map((item.subject, item) for item in rejections),
            rejected_total=message.rejected_total,
        ),
    )


def encode_state(state: State) -> bytes:
    """Serialize `state` (a checkpoint's payload)."""
    return state_to_proto(state).SerializeToString(deterministic=True)


def decode_state(payload: bytes) -> State:
    """Parse a checkpoint's payload (its endpoints as columns when it is in the form `encode_state` writes).

    Raises:
        CodecError: `payload` is not an `aether.log.v1.State`, or holds an enum value this version does not know.
    """
    message = log_pb2.State()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise CodecError(what="checkpoint state", reason=f"not an aether.log.v1.State ({exc})") from exc
    records = message.registry.endpoints
    # The state ignores unknown fields: without them, a payload that is its parse's own bytes is canonical, which
    # is what reading the endpoints as columns needs (`decode_state_endpoints`); any other is read one by one.
    message.DiscardUnknownFields()
    try:
        if records and message.SerializeToString(deterministic=True) == payload:
            return _state_from_proto(message, endpoints=_grouped(decode_state_endpoints(payload, records)))
        return state_from_proto(message)
    except KeyError as exc:
        reason = f"enum value {exc.args[0]!r} is unknown (written by a newer version?)"
        raise CodecError(what="checkpoint state", reason=reason) from exc


def state_digest(state: State) -> str:
    """Return the SHA-256 of the state's bytes, `sha256:<hex>`: equal states, equal digests, in any process."""
    return "sha256:" + hashlib.sha256(encode_state(state)).hexdigest()
