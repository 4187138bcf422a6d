"""Decoding a run of endpoint-upsert records with one protobuf parse: the columns a fold checks, not one message each.

Replay reads millions of `EndpointAdded`/`EndpointUpdated` records. Parsing each into its own message and reading its
fields one by one costs ~20k instructions a record; parsing a batch of them at once, into a *column view*, costs a
tenth of that. The view is the log schema's `Event` with every field of the upsert path made `repeated` (derived from
the schema's descriptors, so it cannot drift from it): protobuf merges the occurrences of a singular sub-message, so
the records, each framed as one occurrence of the same sub-message field, land in one message whose repeated fields
are the batch's columns (the versions, the services, the IPs, ...), in record order.

The batch is taken only when that view says exactly what parsing each record on its own says; otherwise
`decode_upsert_batch` returns None and the caller decodes record by record (which also names what is wrong):
- each record is framed as a length-delimited sub-message, so no record can run into the next;
- the same records are parsed once more into the real schema (merged into one `Event`): that validates them as
  `decode_event` would, and any field it does not know (or finds in another wire form) makes the batch not taken;
- a marker occurrence goes before each record in every column read, and a column is aligned when markers and values
  alternate: so each record holds each field exactly once (a record omitting a field, at its default, is not taken);
- all records are of one kind, and no record carries another kind's field.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf.message import DecodeError, Message

from aether.core.events.base import Event
from aether.core.events.codec import decode_event, decode_upsert_endpoint
from aether.core.events.registry import (
    Endpoint,
    EndpointAdded,
    EndpointUpdated,
    Health,
    HealthCheckMode,
    Protocol,
)
from aether.core.events.wire import DecodedColumns, decode_columns, plan_for
from aether.core.protowire import length_delimited, varint
from aether.proto.log.v1 import log_pb2

_FIELD = descriptor_pb2.FieldDescriptorProto
_VIEW_PACKAGE = "aether.core.events.batch"
_UPSERT_KINDS = ("endpoint_added", "endpoint_updated")
_KNOWN_HEALTH = frozenset(member.value for member in Health)
_KNOWN_MODES = frozenset(member.value for member in HealthCheckMode)
_KNOWN_PROTOCOLS = frozenset(member.value for member in Protocol)


def _column_view(pool: descriptor_pool.DescriptorPool) -> tuple[Any, ...]:
    """Return the column view of an upsert batch, the real-schema container (records merged), the real-schema
    list (one `Event` per record) and the column view of a state's endpoints, all added to `pool`.

    The view copies `Event`, the two upsert bodies and `Endpoint` field for field (same numbers, same types; enums
    as int32), every scalar and string field repeated, the sub-messages on the upsert path singular (they merge).
    """
    file = descriptor_pb2.FileDescriptorProto(
        name="aether/core/events/batch_view.proto",
        package=_VIEW_PACKAGE,
        syntax="proto3",
        dependency=[log_pb2.DESCRIPTOR.name],
    )
    views = {
        log_pb2.Endpoint.DESCRIPTOR.full_name: "EndpointColumns",
        log_pb2.EndpointAdded.DESCRIPTOR.full_name: "UpsertColumns",
        log_pb2.EndpointUpdated.DESCRIPTOR.full_name: "UpsertColumns",
    }
    for source, name in (
        (log_pb2.Endpoint.DESCRIPTOR, "EndpointColumns"),
        (log_pb2.EndpointUpdated.DESCRIPTOR, "UpsertColumns"),
        (log_pb2.Event.DESCRIPTOR, "EventColumns"),
    ):
        message = file.message_type.add(name=name)
        for field in source.fields:
            if field.containing_oneof is not None and field.name not in _UPSERT_KINDS:
                continue  # other kinds: unknown to the view, which is how a record of one shows
            copy = message.field.add(name=field.name, number=field.number, label=_FIELD.LABEL_REPEATED)
            if field.message_type is None:
                copy.type = _FIELD.TYPE_INT32 if field.enum_type is not None else field.type  # type: ignore[assignment]
            elif field.message_type.full_name in views:
                copy.type, copy.label = _FIELD.TYPE_MESSAGE, _FIELD.LABEL_OPTIONAL
                copy.type_name = f".{_VIEW_PACKAGE}.{views[field.message_type.full_name]}"
            else:
                copy.type, copy.type_name = _FIELD.TYPE_MESSAGE, f".{field.message_type.full_name}"
    batch = file.message_type.add(name="BatchColumns")
    batch.field.add(
        name="events", number=1, label=_FIELD.LABEL_OPTIONAL, type=_FIELD.TYPE_MESSAGE,
        type_name=f".{_VIEW_PACKAGE}.EventColumns",
    )  # fmt: skip
    records = file.message_type.add(name="BatchRecords")
    records.field.add(
        name="events", number=1, label=_FIELD.LABEL_REPEATED, type=_FIELD.TYPE_MESSAGE,
        type_name=f".{log_pb2.Event.DESCRIPTOR.full_name}",
    )  # fmt: skip
    merged = file.message_type.add(name="BatchMerged")
    merged.field.add(
        name="events", number=1, label=_FIELD.LABEL_OPTIONAL, type=_FIELD.TYPE_MESSAGE,
        type_name=f".{log_pb2.Event.DESCRIPTOR.full_name}",
    )  # fmt: skip
    # A checkpoint's state with only its endpoints, as columns: the state's registry (singular) holding the
    # endpoints (repeated) as one `EndpointColumns` (singular: the endpoints merge); every other field unknown.
    for name, field, target in (
        (
            "RegistryEndpointColumns",
            log_pb2.RegistryState.DESCRIPTOR.fields_by_name["endpoints"],
            "EndpointColumns",
        ),
        (
            "StateEndpointColumns",
            log_pb2.State.DESCRIPTOR.fields_by_name["registry"],
            "RegistryEndpointColumns",
        ),
    ):
        file.message_type.add(name=name).field.add(
            name=field.name, number=field.number, label=_FIELD.LABEL_OPTIONAL, type=_FIELD.TYPE_MESSAGE,
            type_name=f".{_VIEW_PACKAGE}.{target}",
        )  # fmt: skip
    pool.Add(file)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_VIEW_PACKAGE}.{name}"))
        for name in ("BatchColumns", "BatchMerged", "BatchRecords", "StateEndpointColumns")
    )


_BatchColumns, _BatchMerged, _BatchRecords, _StateEndpointColumns = _column_view(descriptor_pool.Default())


_MAX_FRAMED = 4096
"""Records shorter than this are framed from a table; a batch holding a longer one is not taken (upserts are ~100
bytes)."""
_FRAMES = tuple(varint(1 << 3 | 2) + varint(length) for length in range(_MAX_FRAMED))
"""`_FRAMES[n]`: the tag and length that make an n-byte record one occurrence of `events` (field 1)."""

# The marker: a version, service, protocol, ip, port, ports entry and weight, each at its zero value (which a
# canonical record never writes: it omits default values).
_MARKER_ENDPOINT = b"\x0a\x00" + b"\x10\x00" + b"\x1a\x00" + b"\x20\x00" + b"\x28\x00" + b"\x30\x00"
_MARKERS = {
    kind: length_delimited(
        1,
        length_delimited(
            log_pb2.Event.DESCRIPTOR.fields_by_name[kind].number,
            b"\x0a\x00" + length_delimited(2, _MARKER_ENDPOINT),
        ),
    )
    for kind in _UPSERT_KINDS
}
_EVENT_TYPES: dict[str, type[EndpointAdded] | type[EndpointUpdated]] = {
    "endpoint_added": EndpointAdded,
    "endpoint_updated": EndpointUpdated,
}


def _aligned(column: Any, marker: object, count: int) -> list[Any] | None:
    """Return the values of a column read with a marker before each of `count` records, or None if some record does
    not hold exactly one value (the markers are then not every other entry)."""
    values: list[Any] = column[1::2]
    if len(column) != 2 * count or marker in values or column[0::2].count(marker) != count:
        return None
    return values


def _split(column: Any, marker: int, count: int) -> list[tuple[int, ...]] | None:
    """Return each record's entries of a repeated column read with a marker before each record (None if a record's
    own entries hold the marker value, so where records start cannot be told)."""
    values = list(column)
    if values.count(marker) != count:
        return None
    if len(values) == count:
        return [()] * count
    starts = [index for index, value in enumerate(values) if value == marker]
    starts.append(len(values))
    return [tuple(values[start + 1 : end]) for start, end in itertools.pairwise(starts)]


def _no_unknown_fields(*messages: Message) -> bool:
    return not any(len(unknown_fields.UnknownFieldSet(message)) for message in messages)


class UpsertBatch:
    """Consecutive endpoint-upsert records of one kind, decoded as columns: what a fold checks, one list per field.

    `endpoint_of(index)` builds the endpoint of one record, and `events()` every record's event, exactly as
    `decode_event` builds them from the same bytes (which they re-parse: a fold needs that only for the last upsert
    of each endpoint, or when the run does not take the batch).
    """

    __slots__ = (
        "extra_ports",
        "ips",
        "kind",
        "payloads",
        "ports",
        "protocols",
        "services",
        "versions",
        "weights",
    )

    def __init__(
        self,
        *,
        kind: type[EndpointAdded] | type[EndpointUpdated],
        payloads: Sequence[bytes],
        versions: list[str],
        services: list[str],
        protocols: list[int],
        ips: list[str],
        ports: list[int],
        weights: list[int],
        extra_ports: list[tuple[int, ...]] | None,
    ) -> None:
        self.kind = kind
        self.payloads = payloads
        """The records' payloads, in order."""
        self.versions = versions
        self.services = services
        self.protocols = protocols
        """Protocol wire values (all known members of `Protocol`)."""
        self.ips = ips
        self.ports = ports
        self.weights = weights
        self.extra_ports = extra_ports
        """Each record's `ports`, or None when no record lists any."""

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def observed_at(self) -> int:
        """The observation time of the last record (parsed when asked: a fold does not need it)."""
        return decode_event(self.payloads[-1]).observed_at

    def events(self) -> list[Event]:
        """Build every record's event (what `decode_event` returns for each)."""
        return [decode_event(payload) for payload in self.payloads]


def decode_upsert_batch(payloads: Sequence[bytes]) -> UpsertBatch | None:
    """Decode consecutive records as one `UpsertBatch`, or return None when they are not all endpoint upserts of one
    kind in the form the codec writes (the caller then decodes them one by one, with `decode_for_fold`)."""
    count = len(payloads)
    if not count:
        return None
    try:
        frames = list(map(_FRAMES.__getitem__, map(len, payloads)))
    except IndexError:
        return None
    merged = _BatchMerged()
    try:
        merged.ParseFromString(b"".join(itertools.chain.from_iterable(zip(frames, payloads, strict=True))))
    except DecodeError:
        return None
    event = merged.events
    kind = event.WhichOneof("kind")
    if kind not in _MARKERS:
        return None
    body = getattr(event, kind)
    if not _no_unknown_fields(event, body, body.endpoint):
        return None
    view = _BatchColumns()
    marker = _MARKERS[kind]
    try:
        view.ParseFromString(
            b"".join(itertools.chain.from_iterable(zip(itertools.repeat(marker), frames, payloads)))
        )
    except DecodeError:  # pragma: no cover - the merged parse above read the same records
        return None
    columns = view.events
    other = _UPSERT_KINDS[kind == "endpoint_added"]
    if columns.HasField(other) or not _no_unknown_fields(columns):
        return None
    body_columns = getattr(columns, kind)
    endpoint = body_columns.endpoint
    if not (
        _KNOWN_HEALTH.issuperset(endpoint.health) and _KNOWN_MODES.issuperset(endpoint.health_check_mode)
    ):
        return None
    versions = _aligned(body_columns.version, "", count)
    services = _aligned(endpoint.service, "", count)
    protocols = _aligned(endpoint.protocol, 0, count)
    ips = _aligned(endpoint.ip, "", count)
    ports = _aligned(endpoint.port, 0, count)
    weights = _aligned(endpoint.weight, 0, count)
    extra_ports = _split(endpoint.ports, 0, count)
    if (
        versions is None
        or services is None
        or protocols is None
        or ips is None
        or ports is None
        or weights is None
        or extra_ports is None
        or not _KNOWN_PROTOCOLS.issuperset(protocols)
    ):
        return None
    return UpsertBatch(
        kind=_EVENT_TYPES[kind],
        payloads=payloads,
        versions=versions,
        services=services,
        protocols=protocols,
        ips=ips,
        ports=ports,
        weights=weights,
        extra_ports=None if len(endpoint.ports) == count else extra_ports,
    )


_ENDPOINTS_AT_ONCE = 4096
"""`decode_upsert_endpoints` parses this many records at once (bounding the messages alive at a time)."""


def decode_upsert_endpoints(payloads: Sequence[bytes]) -> list[Endpoint]:
    """Build the endpoint of each endpoint-upsert record, as `decode_upsert_endpoint` does for each one.

    The records are parsed a few thousand at a time, each framed as one `Event` of a repeated field (so each is
    parsed on its own, as the codec parses it); a stretch that does not decode that way is decoded record by record,
    by `decode_upsert_endpoint`, which raises its error for the record at fault.

    Raises:
        CodecError: as `decode_upsert_endpoint`.
    """
    build = plan_for(Endpoint).decode_nested
    endpoints: list[Endpoint] = []
    for start in range(0, len(payloads), _ENDPOINTS_AT_ONCE):
        stretch = payloads[start : start + _ENDPOINTS_AT_ONCE]
        built = len(endpoints)
        try:
            frames = list(map(_FRAMES.__getitem__, map(len, stretch)))
            records = _BatchRecords()
            records.ParseFromString(
                b"".join(itertools.chain.from_iterable(zip(frames, stretch, strict=True)))
            )
            for message in records.events:
                kind = message.WhichOneof("kind")
                if kind not in _MARKERS:
                    raise KeyError(kind)
                endpoints.append(build(getattr(message, kind).endpoint))
        except (
            IndexError,
            DecodeError,
            KeyError,
        ):  # a long record, a bad one, another kind, an unknown enum value
            del endpoints[built:]
            endpoints.extend(map(decode_upsert_endpoint, stretch))
    return endpoints


def decode_state_endpoints(payload: bytes, endpoints: Sequence[Message]) -> DecodedColumns:
    """Build the endpoints of a checkpoint's state, as `plan_for(Endpoint).decode_nested` builds each one.

    `payload` must be the canonical bytes of an `aether.log.v1.State` with no unknown field (each field written once
    when set, omitted at its zero value: what `SerializeToString` of its parse gives back) and `endpoints` its
    `registry.endpoints`, parsed: the payload is parsed once more as columns (`StateEndpointColumns`) and each field
    of the endpoints is read as one list where its column says it can be (see `wire.decode_columns`).

    Raises:
        KeyError: an enum value is not a member of its enum.
    """
    view = _StateEndpointColumns()
    view.ParseFromString(payload)
    return decode_columns(Endpoint, view.registry.endpoints, endpoints)
