"""Tests of `aether.core.events.catalog`: the event types, their kind names and the log record."""

from __future__ import annotations

import attrs
import pytest

from aether.core.events import EVENT_TYPES, KIND_OF, Event, PodAdded, Record, kind_of
from aether.proto.log.v1 import log_pb2
from aether.testing import one_event_of_each_type, pod_removed

_ONEOF_FIELDS = log_pb2.Event.DESCRIPTOR.oneofs_by_name["kind"].fields


def test_every_oneof_field_has_exactly_one_event_class_and_vice_versa() -> None:
    """The oneof `kind` of `aether.log.v1.Event` and the catalog name the same kinds, one class per field."""
    field_names = [field.name for field in _ONEOF_FIELDS]
    assert len(field_names) == len(set(field_names)) == len(EVENT_TYPES)
    assert sorted(KIND_OF.values()) == sorted(field_names)
    assert len(set(KIND_OF.values())) == len(KIND_OF)


def test_each_oneof_field_carries_the_message_named_after_its_class() -> None:
    """The oneof field of an event class holds the message of the same name (`pod_added` holds `PodAdded`)."""
    by_field = {
        field.name: field.message_type.name for field in _ONEOF_FIELDS if field.message_type is not None
    }
    assert {cls.__name__: by_field[KIND_OF[cls]] for cls in EVENT_TYPES} == {
        cls.__name__: cls.__name__ for cls in EVENT_TYPES
    }


def test_the_catalog_lists_types_in_field_number_order() -> None:
    """`EVENT_TYPES` is in wire order: the oneof field numbers of its kinds increase."""
    numbers = {field.name: field.number for field in _ONEOF_FIELDS}
    in_catalog_order = [numbers[KIND_OF[cls]] for cls in EVENT_TYPES]
    assert in_catalog_order == sorted(in_catalog_order)


def test_kind_names_are_the_snake_case_class_names() -> None:
    """Every kind name is its class name in snake case."""
    assert {cls.__name__: KIND_OF[cls] for cls in EVENT_TYPES} == {
        "PodAdded": "pod_added",
        "PodUpdated": "pod_updated",
        "PodRemoved": "pod_removed",
        "NodeCaptureConfigured": "node_capture_configured",
        "EndpointsSnapshotReceived": "endpoints_snapshot_received",
        "EndpointAdded": "endpoint_added",
        "EndpointUpdated": "endpoint_updated",
        "EndpointRemoved": "endpoint_removed",
        "EndpointsSnapshotCompleted": "endpoints_snapshot_completed",
        "RegistryServiceAdded": "registry_service_added",
        "RegistryServiceRemoved": "registry_service_removed",
        "KubeServiceUpserted": "kube_service_upserted",
        "KubeServiceDeleted": "kube_service_deleted",
        "GatewayObjectUpserted": "gateway_object_upserted",
        "GatewayObjectDeleted": "gateway_object_deleted",
        "ReferenceGrantUpserted": "reference_grant_upserted",
        "ReferenceGrantDeleted": "reference_grant_deleted",
        "TlsSecretUpserted": "tls_secret_upserted",
        "TlsSecretDeleted": "tls_secret_deleted",
        "NamespaceUpserted": "namespace_upserted",
        "NamespaceDeleted": "namespace_deleted",
        "EndpointSliceUpserted": "endpoint_slice_upserted",
        "EndpointSliceDeleted": "endpoint_slice_deleted",
        "MeshConfigUpdated": "mesh_config_updated",
        "SvidRotated": "svid_rotated",
        "SvidRemoved": "svid_removed",
        "TrustBundleRotated": "trust_bundle_rotated",
        "TrustBundleRemoved": "trust_bundle_removed",
        "ResourceAcked": "resource_acked",
        "ResourceNacked": "resource_nacked",
        "OnDemandClusterRequested": "on_demand_cluster_requested",
    }


@pytest.mark.parametrize("event", one_event_of_each_type(), ids=[cls.__name__ for cls in EVENT_TYPES])
def test_kind_of_an_event_is_the_kind_of_its_type(event: Event) -> None:
    """`kind_of(event)` is the kind name of the event's type."""
    assert kind_of(event) == KIND_OF[type(event)]


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda cls: cls.__name__)
def test_every_event_type_is_a_frozen_keyword_only_event(cls: type[Event]) -> None:
    """Every event type subclasses `Event`, is frozen, and its fields start with `observed_at` and `source`."""
    assert issubclass(cls, Event)
    assert [field.name for field in attrs.fields(cls)][:2] == ["observed_at", "source"]
    assert all(field.kw_only for field in attrs.fields(cls))
    event = next(item for item in one_event_of_each_type() if type(item) is cls)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.source = "changed"  # type: ignore[misc]


def test_a_record_holds_an_event_at_its_sequence_number() -> None:
    """A `Record` is a frozen pair of a sequence number and an event."""
    event = pod_removed()
    assert Record(seq=7, event=event) == Record(seq=7, event=event)
    assert Record(seq=7, event=event) != Record(seq=8, event=event)
    assert [field.name for field in attrs.fields(Record)] == ["seq", "event"]


def test_kind_of_a_value_outside_the_catalog_raises_key_error() -> None:
    """`kind_of` knows only the catalog's types (a subclass is not its parent's kind)."""

    @attrs.frozen(kw_only=True)
    class Stray(PodAdded):
        pass

    with pytest.raises(KeyError):
        kind_of(Stray(observed_at=0, source="", pod=one_event_of_each_type()[0].pod))  # type: ignore[attr-defined]
