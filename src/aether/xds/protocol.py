"""What SotW and Delta streams share: the checks every request passes, nonces, per-type status, and outputs.

Everything here is sans-IO: a stream machine takes requests and snapshots as values and returns the responses to
send and the feedback events to append; the server (`aether.xds.server`) does the I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

import attrs
from google.protobuf.message import DecodeError, Message

from aether.core.events import Event, ResourceAcked, ResourceNacked
from aether.core.snapshot import SHORT_NAMES, Snapshot
from aether.xds.errors import XdsError

SOURCE = "xds"
"""The `source` of every event the stream machines emit."""

_Request = TypeVar("_Request", bound=Message)


def feedback_event(
    request: Any, *, node_id: str, version: str, now: int, nacked: bool | None = None
) -> ResourceAcked | ResourceNacked:
    """Return the event of a request that answers our last response: a NACK when it carries `error_detail`.

    Args:
        request: A `DiscoveryRequest` or `DeltaDiscoveryRequest` whose `response_nonce` is the response's.
        version: The version of the response it answers.
        nacked: Whether it carries `error_detail`, when the caller knows already (None: look).
    """
    if request.HasField("error_detail") if nacked is None else nacked:
        return ResourceNacked(
            observed_at=now,
            source=SOURCE,
            node_id=node_id,
            type_url=request.type_url,
            version=version,
            nonce=request.response_nonce,
            error_code=request.error_detail.code,
            error_message=request.error_detail.message,
        )
    return ResourceAcked(
        observed_at=now,
        source=SOURCE,
        node_id=node_id,
        type_url=request.type_url,
        version=version,
        nonce=request.response_nonce,
    )


class StatusCode(enum.IntEnum):
    """The gRPC status codes this server answers protocol errors with."""

    INVALID_ARGUMENT = 3
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9


@attrs.define(kw_only=True, str=False)
class ProtocolError(XdsError):
    """A request that breaks the xDS protocol: the stream ends with `code` and this message; others go on."""

    code: StatusCode
    reason: str
    node_id: str | None = None

    def __str__(self) -> str:
        node = "" if self.node_id is None else f"node {self.node_id!r}: "
        return f"{node}{self.reason}"


class TypeStatus(enum.StrEnum):
    """Where one resource type of one stream stands, like `istioctl proxy-status`."""

    NOT_SENT = "NOT SENT"
    """Subscribed, but nothing sent yet (no snapshot for the node)."""
    STALE = "STALE"
    """Sent, not yet acknowledged."""
    SYNCED = "SYNCED"
    """The last response was acknowledged."""
    NACKED = "NACKED"
    """The last response was rejected; Envoy keeps its previous config."""


@attrs.frozen(kw_only=True)
class TypeStatusRow:
    """The status of one type on one stream."""

    type_url: str
    status: TypeStatus
    acked_version: str
    sent_version: str
    error: str = ""

    @property
    def short_type(self) -> str:
        """CDS, EDS, LDS, RDS or SDS."""
        return SHORT_NAMES[self.type_url]


@attrs.frozen(kw_only=True)
class StreamOutput:
    """What a stream machine asks the server to do: send responses (in order) and append events."""

    responses: tuple[Any, ...] = ()
    events: tuple[Event, ...] = ()

    def __add__(self, other: StreamOutput) -> StreamOutput:
        return StreamOutput(responses=self.responses + other.responses, events=self.events + other.events)


NOTHING = StreamOutput()


class StreamMachine(Protocol):
    """What the server drives on one stream, whichever variant it speaks (`SotwStream`, `DeltaStream`)."""

    node_id: str | None
    """The node the stream's first request named (None before it)."""

    @property
    def mode(self) -> str:
        """`sotw` or `delta`."""
        ...

    def receive_bytes(self, data: bytes, *, now: int) -> StreamOutput:
        """Decode a serialized request of the variant and take it (`ProtocolError` for one that breaks the rules)."""
        ...

    def publish(self, snapshot: Snapshot, *, now: int) -> StreamOutput:
        """Adopt a new snapshot of the node and return what to send; `now` stamps the events it emits."""
        ...

    def status(self) -> tuple[TypeStatusRow, ...]:
        """Return the status of every subscribed type, in ADS order."""
        ...

    def sync_states(self) -> tuple[TypeStatus, ...]:
        """Return the status of every subscribed type, in ADS order, without versions (cheap: O(types))."""
        ...


class Nonces:
    """Issues this stream's nonces ("1", "2", ...) and tells a nonce it issued from one it never did."""

    def __init__(self) -> None:
        self._issued = 0

    def issue(self) -> str:
        """Return a new nonce."""
        self._issued += 1
        return str(self._issued)

    def was_issued(self, nonce: str) -> bool:
        """Return True if this stream sent `nonce`."""
        return nonce.isascii() and nonce.isdigit() and 1 <= int(nonce) <= self._issued


def decode_request(message_type: type[_Request], data: bytes, *, node_id: str | None) -> _Request:
    """Parse one request's bytes, as received in a gRPC message, into `message_type`.

    Raises:
        ProtocolError: the bytes are not a serialized `message_type` (INVALID_ARGUMENT).
    """
    request = message_type()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        raise ProtocolError(
            code=StatusCode.INVALID_ARGUMENT,
            reason=f"request of {len(data)} bytes does not decode as {message_type.DESCRIPTOR.full_name}: {exc}",
            node_id=node_id,
        ) from exc
    return request


def check_request(
    nonces: Nonces, current: str | None, *, node_id: str, type_url: str, names: Iterable[str], nonce: str
) -> str:
    """Run every check a request must pass (node, type, names, nonce) and return the stream's node id.

    Raises:
        ProtocolError: the first check that fails.
    """
    node = check_node(current, node_id)
    check_type(type_url, node_id=node)
    check_names(names, type_url=type_url, node_id=node)
    check_nonce(nonces, nonce, type_url=type_url, node_id=node)
    return node


def check_node(current: str | None, node_id: str) -> str:
    """Return the stream's node id: the first request must name one; later requests may omit it.

    Raises:
        ProtocolError: the first request carries no node id.
    """
    if current is not None:
        return current
    if not node_id:
        raise ProtocolError(
            code=StatusCode.INVALID_ARGUMENT,
            reason="the first request on a stream must carry a node id (node.id); set it in Envoy's bootstrap",
        )
    return node_id


def check_type(type_url: str, *, node_id: str | None) -> None:
    """Reject a type URL this server does not serve."""
    if type_url not in SHORT_NAMES:
        served = sorted(SHORT_NAMES)
        raise ProtocolError(
            code=StatusCode.INVALID_ARGUMENT,
            reason=f"type url {type_url!r} is not served; this server serves {served!r}",
            node_id=node_id,
        )


def check_names(names: Iterable[str], *, type_url: str, node_id: str | None) -> None:
    """Reject an empty resource name."""
    if "" in names:
        raise ProtocolError(
            code=StatusCode.INVALID_ARGUMENT,
            reason=f"{SHORT_NAMES[type_url]} request names an empty resource name",
            node_id=node_id,
        )


def check_nonce(nonces: Nonces, nonce: str, *, type_url: str, node_id: str | None) -> None:
    """Reject a response nonce this stream never sent (a stale one it did send is merely ignored by the caller)."""
    if nonce and not nonces.was_issued(nonce):
        raise ProtocolError(
            code=StatusCode.INVALID_ARGUMENT,
            reason=f"{SHORT_NAMES[type_url]} request acknowledges nonce {nonce!r}, which this stream never sent",
            node_id=node_id,
        )
