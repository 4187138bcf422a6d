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
from aether.core.events.wire import WirePlan, plan_for
from aether.proto.log.v1 import log_pb2

_BASE_FIELDS = frozenset(("observed_at", "source"))
_PLANS: dict[type[Event], tuple[str, WirePlan]] = {
    cls: (KIND_OF[cls], plan_for(cls, skip=_BASE_FIELDS)) for cls in EVENT_TYPES
}
_BY_KIND: dict[str, WirePlan] = {kind: plan for kind, plan in _PLANS.values()}


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
        reason = f"{kind}: enum value {exc.args[0]!r} is unknown (written by a newer version?)"
        raise CodecError(what="event record", reason=reason) from exc
    return event


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
    message = log_pb2.Event()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise CodecError(what="event record", reason=f"not an aether.log.v1.Event ({exc})") from exc
    return event_from_proto(message)
