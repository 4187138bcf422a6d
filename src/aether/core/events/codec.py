"""The one codec between events and the log's protobuf schema (`proto/aether/log/v1/log.proto`).

Wire rules: a new event kind is a new oneof field with a new number; numbers are never reused; every map is written
as a sorted list of pairs, so equal events always give equal bytes.
"""

from __future__ import annotations

from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from aether.core.errors import CodecError, UnknownEventKind
from aether.core.events.base import Event
from aether.core.events.catalog import EVENT_TYPES, KIND_OF
from aether.core.events.registry import (
    Endpoint,
    EndpointAdded,
    EndpointUpdated,
    Health,
    HealthCheckMode,
    Protocol,
    endpoint_subject,
)
from aether.core.events.wire import WirePlan, plan_for
from aether.proto.log.v1 import log_pb2

_BASE_FIELDS = frozenset(("observed_at", "source"))
_PLANS: dict[type[Event], tuple[str, WirePlan]] = {
    cls: (KIND_OF[cls], plan_for(cls, skip=_BASE_FIELDS)) for cls in EVENT_TYPES
}
_BY_KIND: dict[str, WirePlan] = {kind: plan for kind, plan in _PLANS.values()}
_ENDPOINT_PLAN = plan_for(Endpoint)
_PROTOCOLS = {member.value: member for member in Protocol}
_KNOWN_HEALTH = frozenset(member.value for member in Health)
_KNOWN_MODES = frozenset(member.value for member in HealthCheckMode)
_UPSERT_KINDS = frozenset((KIND_OF[EndpointAdded], KIND_OF[EndpointUpdated]))


def event_to_proto(event: Event) -> log_pb2.Event:
    """Return `event` as an `aether.log.v1.Event` message."""
    kind, plan = _PLANS[type(event)]
    message = log_pb2.Event(observed_at=event.observed_at, source=event.source)
    plan.encode_into(event, getattr(message, kind))
    return message


def event_from_proto(message: log_pb2.Event) -> Event:
    """Return the event an `aether.log.v1.Event` message carries.

    Raises:
        UnknownEventKind: the message carries a kind this version does not know.
    """
    kind = message.WhichOneof("kind")
    if kind is None:
        unknown = unknown_fields.UnknownFieldSet(message)
        numbers = tuple(sorted({unknown[index].field_number for index in range(len(unknown))}))
        if not numbers:
            raise CodecError(what="event record", reason="it carries no event kind")
        raise UnknownEventKind(what="event record", reason="unknown kind", field_numbers=numbers)
    try:
        event: Event = _BY_KIND[kind].decode(
            getattr(message, kind), observed_at=message.observed_at, source=message.source
        )
    except KeyError as exc:
        raise _unknown_enum(kind, exc) from exc
    return event


def _unknown_enum(kind: str | None, exc: KeyError) -> CodecError:
    reason = f"{kind}: enum value {exc.args[0]!r} is unknown (written by a newer version?)"
    return CodecError(what="event record", reason=reason)


def encode_event(event: Event) -> bytes:
    """Serialize `event` to the bytes of one log record.

    Raises:
        CodecError: a field holds a value its wire type cannot (a negative port, a weight over 2**32, ...);
            the adapter that built the event must range-check what it observed.
    """
    try:
        return event_to_proto(event).SerializeToString(deterministic=True)
    except (ValueError, TypeError) as exc:
        raise CodecError(what=type(event).__name__, reason=str(exc), operation="encode") from exc


def decode_event(payload: bytes) -> Event:
    """Parse the bytes of one log record.

    Raises:
        CodecError: `payload` is not an `aether.log.v1.Event`.
        UnknownEventKind: it is one, of a kind this version does not know.
    """
    return event_from_proto(_parse(payload))


def _parse(payload: bytes) -> log_pb2.Event:
    message = log_pb2.Event()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise CodecError(what="event record", reason=f"not an aether.log.v1.Event ({exc})") from exc
    return message


class PendingUpsert:
    """An `EndpointAdded`/`EndpointUpdated` record parsed but not yet built: the fields a fold checks, read once,
    and the parsed message, from which `endpoint()` and `event()` build the values `decode_event` would.

    Replay folds runs of endpoint upserts in which a later upsert of the same endpoint replaces an earlier one
    (`registry.UpsertRun`): building the 17-field `Endpoint` and its event is most of a record's decoding, and
    only the last upsert of each endpoint in a run needs them. Equal bytes still give equal values: both are
    built by the one wire plan `decode_event` uses.
    """

    __slots__ = (
        "_body",
        "_message",
        "ip",
        "port",
        "ports",
        "protocol",
        "service",
        "version",
        "weight",
    )

    def __init__(self, message: log_pb2.Event, kind: str) -> None:
        self._message = message
        body = self._body = getattr(message, kind)
        endpoint = body.endpoint
        self.version: str = body.version
        self.service: str = endpoint.service
        self.protocol: Protocol = _PROTOCOLS[endpoint.protocol]
        self.ip: str = endpoint.ip
        self.port: int = endpoint.port
        self.weight: int = endpoint.weight
        ports = endpoint.ports
        self.ports: tuple[int, ...] = tuple(ports) if ports else ()
        # The endpoint's other enums are checked now, so that building it later cannot fail.
        if endpoint.health not in _KNOWN_HEALTH:
            raise KeyError(endpoint.health)
        if endpoint.health_check_mode not in _KNOWN_MODES:
            raise KeyError(endpoint.health_check_mode)

    @property
    def observed_at(self) -> int:
        """The event's observation time (read when asked: a fold does not need it)."""
        observed_at: int = self._message.observed_at
        return observed_at

    @property
    def subject(self) -> str:
        """The subject of the event it stands for (as that event's `subject`)."""
        return endpoint_subject(self.service, self.protocol, self.ip)

    def endpoint(self) -> Endpoint:
        """Build the endpoint it carries."""
        endpoint: Endpoint = _ENDPOINT_PLAN.decode_nested(self._body.endpoint)
        return endpoint

    def event(self) -> Event:
        """Build the event it stands for: what `decode_event` returns for the same bytes."""
        return event_from_proto(self._message)


def decode_upsert_endpoint(payload: bytes) -> Endpoint:
    """Parse an `EndpointAdded`/`EndpointUpdated` record and build only its endpoint (what a fold keeps of it).

    Raises:
        CodecError: as `decode_event`, and when the record is not an endpoint upsert.
    """
    message = _parse(payload)
    kind = message.WhichOneof("kind")
    if kind not in _UPSERT_KINDS:
        raise CodecError(what="event record", reason=f"an endpoint upsert was expected, not {kind!r}")
    try:
        endpoint: Endpoint = _ENDPOINT_PLAN.decode_nested(getattr(message, kind).endpoint)
    except KeyError as exc:
        raise _unknown_enum(kind, exc) from exc
    return endpoint


def decode_for_fold(payload: bytes) -> Event | PendingUpsert:
    """Parse one record as `decode_event` does, leaving an endpoint upsert unbuilt (`PendingUpsert`).

    Raises:
        CodecError: as `decode_event`.
        UnknownEventKind: as `decode_event`.
    """
    message = _parse(payload)
    kind = message.WhichOneof("kind")
    if kind in _UPSERT_KINDS:
        try:
            return PendingUpsert(message, kind)
        except KeyError as exc:
            raise _unknown_enum(kind, exc) from exc
    return event_from_proto(message)
