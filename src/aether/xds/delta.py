"""The incremental (Delta) stream machine: one `DeltaAggregatedResources` stream, sans-IO.

Per type it tracks the subscription (names, wildcard), the versions Envoy holds (acknowledged), the versions it will
hold once every response in flight is acknowledged (expected), and versions it rejected. A push sends only what
differs from `expected`; a rejected version is never sent again; resources that left the snapshot are sent as
`removed_resources`. Per-resource versions are the resource digests
(https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol#incremental-xds).

A push costs O(changed): when the new snapshot was derived from the one a type was last brought in line with
(`Snapshot.changed_since`), only the names changed since are compared; otherwise (a snapshot built whole, a
subscription turned wildcard) every resource of the type is.

A NACK rejects a response, not a resource: Envoy's `error_detail` says the response "failed to update
configuration", and its Delta client then records none of the response's versions (`DeltaSubscriptionState::
handleBadResponse`). So only the resource of a NACKed response that carried exactly one is known to be bad and is
marked rejected. The resources of a NACKed response that carried several are sent again at once, one per response,
so the bad one is found and the good ones still reach Envoy (n extra responses for a NACKed response of n).

The first request of each type is always answered, with an empty response if Envoy already holds everything.

On-demand CDS: a cluster subscribed by name that the snapshot does not hold becomes an `OnDemandClusterRequested`
event; it is sent when a later snapshot holds it, or answered as removed when the snapshot lists it as not found.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import attrs
from envoy.service.discovery.v3 import discovery_pb2

from aether.core.events import OnDemandClusterRequested
from aether.core.snapshot import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    SHORT_NAMES,
    TYPE_ORDER,
    WILDCARD_TYPES,
    Resource,
    Snapshot,
    version_of,
)
from aether.xds.protocol import (
    NOTHING,
    SOURCE,
    Nonces,
    ProtocolError,
    StatusCode,
    StreamOutput,
    TypeStatus,
    TypeStatusRow,
    check_request,
    decode_request,
    feedback_event,
)

_REMOVED = ""
"""The version recorded for a name sent as removed."""


@attrs.define(kw_only=True)
class _Sent:
    changes: dict[str, str]
    """What the response changed: name → digest, or `_REMOVED`."""
    version: str
    """The response's `system_version_info`: the snapshot's version of the type (what ACK and NACK events carry)."""


@attrs.define(kw_only=True)
class _TypeState:
    type_url: str
    wildcard: bool = False
    names: set[str] = attrs.Factory(set)
    acked: dict[str, str] = attrs.Factory(dict)
    """Name → version Envoy holds (acknowledged, or stated when it reconnected)."""
    expected: dict[str, str] = attrs.Factory(dict)
    """Name → version Envoy will hold once every response in flight is acknowledged."""
    rejected: dict[str, str] = attrs.Factory(dict)
    """Name → version Envoy rejected: never sent again."""
    in_flight: dict[str, _Sent] = attrs.Factory(dict)
    requested: set[str] = attrs.Factory(set)
    """Names already reported as requested on demand (one event per name and stream, until Envoy subscribes the
    name again)."""
    sent_any: bool = False
    """A response of this type went out on this stream (the first one goes out even when empty)."""
    error: str = ""
    synced_to: Snapshot | None = None
    """The snapshot `expected` was last brought in line with, for this type (None: compare every resource)."""
    dirty: set[str] = attrs.Factory(set)
    """Names whose `expected` changed since `synced_to` other than by a push: compared at the next push too."""
    isolate: set[str] = attrs.Factory(set)
    """Names of a NACKed response of several resources: each goes out alone next, so a NACK names the bad one."""

    def covers(self, name: str) -> bool:
        return self.wildcard or name in self.names


class DeltaStream:
    """The protocol state of one Delta ADS stream. Feed it requests and snapshots; send what it returns."""

    mode = "delta"
    """The variant, as `aether status` shows it (`aether.xds.protocol.StreamMachine`)."""

    def __init__(self) -> None:
        self.node_id: str | None = None
        self._types: dict[str, _TypeState] = {}
        self._nonces = Nonces()
        self._snapshot: Snapshot | None = None

    def receive_bytes(self, data: bytes, *, now: int) -> StreamOutput:
        """Decode one request as received (a gRPC message's bytes) and handle it like `receive`.

        Raises:
            ProtocolError: the bytes are no `DeltaDiscoveryRequest`, or the request breaks the protocol.
        """
        return self.receive(
            decode_request(discovery_pb2.DeltaDiscoveryRequest, data, node_id=self.node_id), now=now
        )

    def receive(self, request: discovery_pb2.DeltaDiscoveryRequest, *, now: int) -> StreamOutput:
        """Handle one request from Envoy observed at `now` (ns since the epoch).

        Raises:
            ProtocolError: the request breaks the protocol (the stream must end with its status).
        """
        type_url = request.type_url
        subscribe, unsubscribe = request.resource_names_subscribe, request.resource_names_unsubscribe
        nonce = request.response_nonce
        self.node_id = check_request(
            self._nonces,
            self.node_id,
            node_id=request.node.id,
            type_url=type_url,
            names=itertools.chain(subscribe, unsubscribe),
            nonce=nonce,
        )
        state = self._types.get(type_url)
        first = state is None
        if state is None:
            state = self._types[type_url] = _TypeState(type_url=type_url)
        output = NOTHING
        if nonce:
            output = self._feedback(state, request, now=now)
            if state.isolate and not first:
                output += self._push(state)  # the resources of a NACKed response, one per response
        if first:
            state.acked = dict(request.initial_resource_versions)
            state.expected = dict(state.acked)
            if not subscribe and type_url in WILDCARD_TYPES:
                state.wildcard = True  # the legacy wildcard: a first CDS/LDS request naming nothing
        if first or subscribe or unsubscribe:
            self._update_subscription(state, request)
            output += self._on_demand(state, now=now) + self._push(state)
        # A plain ACK or NACK needs no push: what is new reaches Envoy through `publish`.
        return output

    def publish(self, snapshot: Snapshot, *, now: int) -> StreamOutput:
        """Adopt a new snapshot and return what differs from what Envoy holds, type by type in ADS order."""
        self._snapshot = snapshot
        output = NOTHING
        for type_url in TYPE_ORDER:
            state = self._types.get(type_url)
            if state is not None:
                output += self._on_demand(state, now=now) + self._push(state)
        return output

    def status(self) -> tuple[TypeStatusRow, ...]:
        """Return the status of every subscribed type, in ADS order (versions summarize the held set)."""
        rows = []
        for type_url in TYPE_ORDER:
            state = self._types.get(type_url)
            if state is None:
                continue
            rows.append(
                TypeStatusRow(
                    type_url=type_url,
                    status=_type_status(state),
                    acked_version=_summary(state.acked),
                    sent_version=_summary(state.expected),
                    error=state.error,
                )
            )
        return tuple(rows)

    def sync_states(self) -> tuple[TypeStatus, ...]:
        """Return the status of every subscribed type, in ADS order, without the versions `status` summarizes: O(types),
        where `status` hashes every name Envoy holds (what the proxies gauge reads, on every metrics export)."""
        return tuple(
            _type_status(state) for type_url in TYPE_ORDER if (state := self._types.get(type_url)) is not None
        )

    def _feedback(
        self, state: _TypeState, request: discovery_pb2.DeltaDiscoveryRequest, *, now: int
    ) -> StreamOutput:
        sent = state.in_flight.pop(request.response_nonce, None)
        if sent is None:
            return NOTHING  # already answered (a duplicate) or superseded
        assert self.node_id is not None
        nacked = request.HasField("error_detail")
        if nacked:
            # Envoy holds none of the response's versions; which resource failed, it does not say (see the module).
            updated = [name for name, version in sent.changes.items() if version != _REMOVED]
            if len(updated) == 1:
                state.rejected[updated[0]] = sent.changes[updated[0]]
            else:
                state.isolate.update(updated)
            for name in sent.changes:
                _restore(state.expected, name, state.acked.get(name))
            state.dirty.update(sent.changes)
            state.error = request.error_detail.message
        else:
            for name, version in sent.changes.items():
                _restore(state.acked, name, None if version == _REMOVED else version)
            state.error = ""
        return StreamOutput(
            events=(
                feedback_event(request, node_id=self.node_id, version=sent.version, now=now, nacked=nacked),
            )
        )

    def _update_subscription(self, state: _TypeState, request: discovery_pb2.DeltaDiscoveryRequest) -> None:
        wildcard_before = state.wildcard
        for name in request.resource_names_unsubscribe:
            if name == "*":
                state.wildcard = False
                continue
            if name not in state.names:
                raise ProtocolError(
                    code=StatusCode.INVALID_ARGUMENT,
                    reason=f"{SHORT_NAMES[state.type_url]} request unsubscribes {name!r}, which it never subscribed",
                    node_id=self.node_id,
                )
            state.names.discard(name)
            if not state.wildcard:
                # Envoy forgets an unsubscribed resource; so do we (it is not "removed", just not wanted).
                for held in (state.acked, state.expected):
                    held.pop(name, None)
        for name in request.resource_names_subscribe:
            if name == "*":
                state.wildcard = True
                continue
            if name in state.names:
                # Subscribed again on the same stream: Envoy marks the name "waiting for the server" (it dropped the
                # resource, or a cluster it re-warms needs it), so it goes out again when held, and is asked for on
                # demand again when not (an on-demand cluster that expired and is wanted once more).
                for held in (state.acked, state.expected):
                    held.pop(name, None)
                state.requested.discard(name)
            state.names.add(name)
        # A newly subscribed name may not be among the names changed since `synced_to`: compare it at the next push.
        state.dirty.update(request.resource_names_subscribe)
        if state.wildcard != wildcard_before:
            state.synced_to = None

    def _on_demand(self, state: _TypeState, *, now: int) -> StreamOutput:
        if state.type_url != CLUSTER_TYPE or self._snapshot is None:
            return NOTHING
        held = self._snapshot.of_type(CLUSTER_TYPE)
        missing = sorted(
            name
            for name in state.names
            if name not in held and name not in self._snapshot.not_found and name not in state.requested
        )
        assert self.node_id is not None
        state.requested.update(missing)
        events = tuple(
            OnDemandClusterRequested(observed_at=now, source=SOURCE, node_id=self.node_id, cluster_name=name)
            for name in missing
        )
        return StreamOutput(events=events)

    def _push(self, state: _TypeState) -> StreamOutput:
        snapshot = self._snapshot
        if snapshot is None:
            return NOTHING
        if state.synced_to is snapshot and not state.dirty and not state.isolate and state.sent_any:
            return NOTHING
        changed = None if state.synced_to is None else snapshot.changed_since(state.synced_to)
        if changed is None:
            updates, gone = self._differences(state, snapshot, None)
        else:
            candidates = changed.get(state.type_url, set())
            candidates.update(state.dirty, state.isolate)
            updates, gone = self._differences(state, snapshot, candidates)
        state.synced_to, state.dirty = snapshot, set()
        # One set: a name Envoy said it held that is also known not to exist is removed once (Envoy NACKs a response
        # naming a resource twice).
        removed = sorted(gone)
        alone = [resource for resource in updates if resource.name in state.isolate]
        together = [resource for resource in updates if resource.name not in state.isolate]
        state.isolate.clear()
        # The first request of a type on a stream is always answered, even with nothing to change (a reconnect whose
        # initial_resource_versions are current): Envoy waits for a first response before it finishes initializing,
        # and resets its reconnect backoff only when a response arrives (its GrpcStream::onReceiveMessage), so a
        # silent resync would make every later reconnect wait longer. Envoy ACKs an empty response.
        responses = []
        if together or removed or not state.sent_any:
            responses.append(self._response(state, together, removed))
        responses.extend(self._response(state, [resource], []) for resource in alone)
        return StreamOutput(responses=tuple(responses)) if responses else NOTHING

    def _differences(
        self, state: _TypeState, snapshot: Snapshot, candidates: set[str] | None
    ) -> tuple[list[Resource], set[str]]:
        """Return the resources to send (by name) and the names to remove, looking at `candidates` only (None: all)."""
        held = snapshot.of_type(state.type_url)
        expected, rejected = state.expected, state.rejected
        if candidates is None:
            present: Iterable[Resource] = held.values()
            absent: Iterable[str] = state.expected
            not_found: Iterable[str] = state.names & snapshot.not_found
        else:
            present = [held[name] for name in candidates if name in held]
            absent = [name for name in candidates if name in expected]
            not_found = [name for name in candidates if name in snapshot.not_found and name in state.names]
        updates = sorted(
            (
                resource
                for resource in present
                if expected.get(resource.name) != resource.digest
                and rejected.get(resource.name) != resource.digest
                and state.covers(resource.name)
            ),
            key=lambda resource: resource.name,
        )
        gone = {
            name for name in absent if expected[name] != _REMOVED and name not in held and state.covers(name)
        }
        if state.type_url == CLUSTER_TYPE:
            # Names asked for on demand that no service matches: answer "removed" rather than leave Envoy waiting.
            gone.update(name for name in not_found if expected.get(name) != _REMOVED and name not in held)
        return updates, gone

    def _response(
        self, state: _TypeState, updates: list[Resource], removed: list[str]
    ) -> discovery_pb2.DeltaDiscoveryResponse:
        """Build one response and note what it changes as expected and in flight."""
        assert self._snapshot is not None
        nonce = self._nonces.issue()
        response = discovery_pb2.DeltaDiscoveryResponse(
            type_url=state.type_url, nonce=nonce, system_version_info=self._snapshot.version(state.type_url)
        )
        for resource in updates:
            resource.pack_into(response.resources.add(name=resource.name, version=resource.digest).resource)
        response.removed_resources.extend(removed)
        changes = {resource.name: resource.digest for resource in updates} | dict.fromkeys(removed, _REMOVED)
        if state.type_url == CLUSTER_TYPE:
            self._forget_endpoints_of(name for name in changes if name in state.expected)
        state.expected.update(changes)
        state.in_flight[nonce] = _Sent(changes=changes, version=response.system_version_info)
        state.sent_any = True
        return response

    def _forget_endpoints_of(self, clusters: Iterable[str]) -> None:
        """After a cluster changes, Envoy re-creates it and needs its endpoints again: Delta does not ask."""
        endpoints = self._types.get(ENDPOINT_TYPE)
        if endpoints is not None:
            for name in clusters:
                endpoints.expected.pop(name, None)
                endpoints.dirty.add(name)


def _type_status(state: _TypeState) -> TypeStatus:
    if state.error:
        return TypeStatus.NACKED
    if state.in_flight:
        return TypeStatus.STALE
    if state.sent_any or state.acked:
        return TypeStatus.SYNCED
    return TypeStatus.NOT_SENT


def _restore(held: dict[str, str], name: str, version: str | None) -> None:
    if version is None:
        held.pop(name, None)
    else:
        held[name] = version


def _summary(versions: dict[str, str]) -> str:
    """A short version for a set of resource versions (status and feedback events): a digest of the set."""
    return version_of(versions)
