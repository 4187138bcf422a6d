"""The state-of-the-world stream machine: one `StreamAggregatedResources` stream, sans-IO.

Per type it tracks what was subscribed, what was sent under which nonce, and what Envoy accepted or rejected.
The rules (https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol#ack-nack-and-resource-type-instance-version):
- a request whose nonce matches the last response of its type is an ACK, or a NACK when it carries error_detail;
- a request with an older nonce is stale and ignored; one with a nonce this stream never sent is a protocol error;
- a NACK is recorded and never answered by re-sending the rejected resources: only a newer snapshot is sent;
- a request without a nonce (a new or reconnected subscription) is always answered, even when it states the version
  we would send: Envoy resets its reconnect backoff only when a response arrives, and skips resources it already
  holds unchanged (so a reconnect costs bytes, not churn);
- after clusters change, the next EDS request is answered even if the endpoints did not change (the CDS→EDS warming
  trap: a re-created cluster waits for its endpoints).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
from envoy.service.discovery.v3 import discovery_pb2

from aether.core.events import ResourceNacked
from aether.core.snapshot import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    TYPE_ORDER,
    WILDCARD_TYPES,
    Resource,
    Snapshot,
    aggregate_version,
)
from aether.xds.encoding import EncodedResources, EncodedResponse
from aether.xds.protocol import (
    NOTHING,
    Nonces,
    StreamOutput,
    TypeStatus,
    TypeStatusRow,
    check_request,
    decode_request,
    feedback_event,
)


@attrs.define(kw_only=True)
class _TypeState:
    type_url: str
    names: frozenset[str] | None = None
    """Subscribed names; None is a wildcard subscription."""
    sent_version: str = ""
    sent_nonce: str = ""
    sent_digests: dict[str, str] = attrs.Factory(dict)
    acked_version: str = ""
    nacked_version: str = ""
    error: str = ""
    always_respond: bool = False
    """Answer the next request even if nothing changed (EDS after a cluster change)."""
    answered: bool = False
    """The subscription got a response: Envoy is not waiting for a first one."""
    selection: _Selection | None = None
    """What a named subscription selects from the last snapshot looked at (reused for the next one)."""
    listed: tuple[str, ...] | None = None
    """The names the type's last request listed, as listed (None before any request)."""
    listed_as: frozenset[str] | None = None
    """The subscription `listed` makes (`_subscription`): an EDS ACK lists every name again, and the same list is
    not made a set again."""


@attrs.define(kw_only=True)
class _Selection:
    """The resources a named subscription selects from `snapshot`, in name order, and their version's aggregate.

    SotW must send every selected resource on each change, but finding them need not cost a sort and a lookup per
    name, nor encoding them a copy per resource: from a snapshot derived from `snapshot` (`Snapshot.changed_since`),
    only the changed names are looked at, and only their blocks encoded again.
    """

    names: frozenset[str]
    snapshot: Snapshot
    resources: dict[str, Resource]
    aggregate: int
    encoded: EncodedResources
    """`resources` serialized in blocks: a push re-encodes only the blocks of the names that changed."""


class SotwStream:
    """The protocol state of one SotW ADS stream. Feed it requests and snapshots; send what it returns."""

    mode = "sotw"
    """The variant, as `aether status` shows it (`aether.xds.protocol.StreamMachine`)."""

    def __init__(self) -> None:
        self.node_id: str | None = None
        self._types: dict[str, _TypeState] = {}
        self._nonces = Nonces()
        self._snapshot: Snapshot | None = None

    def receive_bytes(self, data: bytes, *, now: int) -> StreamOutput:
        """Decode one request as received (a gRPC message's bytes) and handle it like `receive`.

        Raises:
            ProtocolError: the bytes are no `DiscoveryRequest`, or the request breaks the protocol.
        """
        return self.receive(
            decode_request(discovery_pb2.DiscoveryRequest, data, node_id=self.node_id), now=now
        )

    def receive(self, request: discovery_pb2.DiscoveryRequest, *, now: int) -> StreamOutput:
        """Handle one request from Envoy observed at `now` (ns since the epoch).

        Raises:
            ProtocolError: the request breaks the protocol (the stream must end with its status).
        """
        type_url, nonce = request.type_url, request.response_nonce
        # Read once: each read of a repeated field builds its strings anew (an EDS ACK names every cluster).
        listed = tuple(request.resource_names)
        self.node_id = check_request(
            self._nonces,
            self.node_id,
            node_id=request.node.id,
            type_url=type_url,
            names=listed,
            nonce=nonce,
        )
        state = self._types.get(type_url)
        if state is None:
            state = self._types[type_url] = _TypeState(type_url=type_url)
        names = self._subscription(state, listed)
        if not nonce:
            state.names = names
            return self._respond(type_url, state)  # before any snapshot: answered by the first publish
        if nonce != state.sent_nonce:
            return NOTHING  # stale: an answer to a response we have since superseded
        event = feedback_event(request, node_id=self.node_id, version=state.sent_version, now=now)
        if isinstance(event, ResourceNacked):
            state.nacked_version, state.error = state.sent_version, event.error_message
            return StreamOutput(events=(event,))
        state.acked_version, state.nacked_version, state.error = request.version_info, "", ""
        acked = event
        changed = names is not state.names and names != state.names
        if changed:  # an equal set keeps its object: the selection cached for it stays usable
            state.names = names
        if changed or state.always_respond:
            return StreamOutput(events=(acked,)) + self._respond(type_url, state)
        return StreamOutput(events=(acked,))

    def publish(self, snapshot: Snapshot, *, now: int) -> StreamOutput:
        """Adopt a new snapshot and return the responses for every subscribed type whose content changed.

        `now` is unused: a SotW publish emits no events (it is in the signature `StreamMachine` shares with Delta).
        """
        self._snapshot = snapshot
        output = NOTHING
        for type_url in TYPE_ORDER:
            state = self._types.get(type_url)
            if state is None:
                continue
            version = self._version(state)
            # An empty type still gets its first (empty) response: Envoy waits for one before it finishes warming.
            if not state.answered or version != state.sent_version or state.always_respond:
                output += self._respond(type_url, state)
        return output

    def status(self) -> tuple[TypeStatusRow, ...]:
        """Return the status of every subscribed type, in ADS order."""
        rows = []
        for type_url in TYPE_ORDER:
            state = self._types.get(type_url)
            if state is None:
                continue
            if not state.sent_nonce and not state.acked_version:
                status = TypeStatus.NOT_SENT
            elif state.nacked_version:
                status = TypeStatus.NACKED
            elif state.acked_version == state.sent_version:
                status = TypeStatus.SYNCED
            else:
                status = TypeStatus.STALE
            rows.append(
                TypeStatusRow(
                    type_url=type_url,
                    status=status,
                    acked_version=state.acked_version,
                    sent_version=state.sent_version,
                    error=state.error,
                )
            )
        return tuple(rows)

    def sync_states(self) -> tuple[TypeStatus, ...]:
        """Return the status of every subscribed type, in ADS order (`status` without its versions)."""
        return tuple(row.status for row in self.status())

    def _subscription(self, state: _TypeState, listed: tuple[str, ...]) -> frozenset[str] | None:
        """The subscription `listed` names: the one of the type's last request again when it lists the same names."""
        if listed != state.listed:
            state.listed, state.listed_as = listed, _subscription(state.type_url, listed)
        return state.listed_as

    def _version(self, state: _TypeState) -> str:
        if self._snapshot is not None and state.names is None:
            return self._snapshot.version(state.type_url)  # O(1): kept up to date by the snapshot
        selected = self._selected(state)
        assert state.selection is not None, "_selected keeps the selection of a named subscription"
        return aggregate_version(state.selection.aggregate, count=len(selected))

    def _selected(self, state: _TypeState) -> Mapping[str, Resource]:
        snapshot = self._snapshot
        if snapshot is None:
            return {}
        held = snapshot.of_type(state.type_url)
        names = state.names
        if names is None:
            return held
        cached = state.selection
        if cached is not None and cached.names is names:
            if cached.snapshot is snapshot:
                return cached.resources
            changed = snapshot.changed_since(cached.snapshot)
            if changed is not None:
                _update_selection(cached, changed.get(state.type_url, set()), held)
                cached.snapshot = snapshot
                return cached.resources
        resources = {name: held[name] for name in sorted(names) if name in held}
        aggregate = 0
        for resource in resources.values():
            aggregate ^= resource.entry_hash
        state.selection = _Selection(
            names=names,
            snapshot=snapshot,
            resources=resources,
            aggregate=aggregate,
            encoded=EncodedResources(resources),
        )
        return resources

    def _respond(self, type_url: str, state: _TypeState) -> StreamOutput:
        if self._snapshot is None:
            return NOTHING
        selected = self._selected(state)
        version = self._version(state)
        if state.nacked_version and version == state.nacked_version and not state.always_respond:
            return NOTHING  # never answer a NACK with what was rejected
        nonce = self._nonces.issue()
        if state.names is None:
            message = discovery_pb2.DiscoveryResponse(version_info=version, type_url=type_url, nonce=nonce)
            for resource in selected.values():
                resource.pack_into(message.resources.add())
            response = EncodedResponse(
                type_url=type_url, version_info=version, nonce=nonce, data=message.SerializeToString()
            )
        else:
            assert state.selection is not None, "_selected keeps the selection of a named subscription"
            response = state.selection.encoded.response(
                selected, type_url=type_url, version=version, nonce=nonce
            )
        if type_url == CLUSTER_TYPE:  # only cluster digests are compared (the CDS→EDS trap)
            digests = {name: resource.digest for name, resource in selected.items()}
            if any(state.sent_digests.get(name) not in (None, digest) for name, digest in digests.items()):
                endpoints = self._types.get(ENDPOINT_TYPE)
                if endpoints is not None:
                    endpoints.always_respond = True
            state.sent_digests = digests
        state.sent_version, state.sent_nonce = version, nonce
        state.always_respond = False
        state.answered = True
        return StreamOutput(responses=(response,))


def _update_selection(selection: _Selection, changed: Iterable[str], held: Mapping[str, Resource]) -> None:
    """Bring `selection` in line with `held` for the `changed` names (the others are unchanged)."""
    resources = selection.resources
    inserted = False
    for name in changed:
        if name not in selection.names:
            continue
        before, after = resources.get(name), held.get(name)
        if before is after:
            continue
        selection.encoded.changed(name, held=after is not None)
        if before is not None:
            selection.aggregate ^= before.entry_hash
        if after is None:
            del resources[name]
        else:
            selection.aggregate ^= after.entry_hash
            inserted = inserted or before is None
            resources[name] = after  # an existing name keeps its place in the name order
    if inserted:
        selection.resources = dict(sorted(resources.items()))


def _subscription(type_url: str, names: Iterable[str]) -> frozenset[str] | None:
    listed = frozenset(names)
    if "*" in listed or (not listed and type_url in WILDCARD_TYPES):
        return None
    return listed
