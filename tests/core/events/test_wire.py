"""Tests of `aether.core.events.wire`: the attrs-to-protobuf mapping derived from type hints."""

from __future__ import annotations

import attrs
import pytest

from aether.core.errors import InternalError
from aether.core.events import Endpoint, Pod
from aether.core.events.wire import decode_columns, plan_for
from aether.proto.log.v1 import log_pb2
from aether.testing import make_endpoint, make_pod


@attrs.frozen(kw_only=True)
class Ratio:
    """A value with a field type the mapping does not know."""

    value: float


def test_a_plan_is_derived_once_per_class_and_skip_set() -> None:
    """`plan_for` caches: the same class and skip set give the very same plan."""
    assert plan_for(Pod) is plan_for(Pod)
    assert plan_for(Pod) is not plan_for(Pod, skip=frozenset({"netns"}))


def test_a_value_round_trips_through_its_message() -> None:
    """Scalars, tuples, string maps and enums cross to the message and back unchanged."""
    endpoint = make_endpoint(ports=(9090, 9091), metadata={"b": "2", "a": "1"})
    message = log_pb2.Endpoint()
    plan_for(Endpoint).encode_into(endpoint, message)
    assert [(pair.key, pair.value) for pair in message.metadata] == [("a", "1"), ("b", "2")]
    assert list(message.ports) == [9090, 9091]
    assert plan_for(Endpoint).decode(message) == endpoint


def test_skipped_fields_are_not_written_and_come_from_extra() -> None:
    """A skipped field is left out of the message and supplied on decode."""
    pod = make_pod(netns="/var/run/netns/cni-1")
    plan = plan_for(Pod, skip=frozenset({"netns"}))
    message = log_pb2.Pod()
    plan.encode_into(pod, message)
    assert message.netns == ""
    assert plan.decode(message, netns="/var/run/netns/cni-1") == pod


def test_encoding_marks_an_empty_message_present() -> None:
    """A value whose fields are all defaults still marks its sub-message present."""
    message = log_pb2.PodAdded()
    plan_for(Pod).encode_into(Pod(namespace="", name="", service_account=""), message.pod)
    assert message.HasField("pod")


def test_a_field_type_the_mapping_does_not_know_is_an_internal_error() -> None:
    """A class with a field of an unmapped type (float) cannot get a plan: that is a bug."""
    with pytest.raises(
        InternalError,
        match=r"^internal error \(this is a bug\): field 'value' has a type the wire mapping does not know:"
        r" <class 'float'>$",
    ):
        plan_for(Ratio)


@attrs.frozen(kw_only=True)
class Checked:
    """A value whose `__init__` validates: not stored slot by slot."""

    value: str = attrs.field(validator=attrs.validators.instance_of(str))


def test_columns_decode_only_classes_stored_slot_by_slot_with_plain_fields() -> None:
    """A class with a validator, or with a field type columns do not decode, is refused as a bug."""
    columns = log_pb2.StringPair(value="1.5")
    with pytest.raises(InternalError, match=r"Checked is not stored slot by slot"):
        decode_columns(Checked, columns, [columns])
    with pytest.raises(
        InternalError, match=r"field 'value' has a type columns do not decode: <class 'float'>"
    ):
        decode_columns(Ratio, columns, [columns])
