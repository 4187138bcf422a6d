"""Versioned, consistency-checked snapshots: the Envoy resources one node should hold, with their digests.

A snapshot is a value: resources by type URL, each resource kept as its deterministic serialized bytes plus a digest
of those bytes. Versions are content hashes, so folding the same log gives the same versions, and a resource that
did not change keeps its version (no churn on Envoy).

The digest of a resource is blake2b-128 of its bytes, except for a resource assembled from `Piece`s (a mesh route
table: one piece per service's virtual hosts, in groups of them). A piece of bytes has the blake2b-128 of its bytes
as its digest, computed once where it is made; a group of pieces has blake2b-128 (personalized `PIECES_PERSON`) over
the sequence of its non-empty members' digests; a resource of pieces has the digest of the group of them (a hash
tree). It is still a content digest (the same pieces give the same digest, and pieces of other bytes another one),
but the split is part of it: the same bytes cut or grouped otherwise give another digest, so whoever assembles a
resource from pieces cuts and groups them as a function of content. Adding one service to a table of 10,000 then
hashes its own bytes, its group's member digests and the table's group digests, not 17 MB.

The version of a set of resources is the XOR of one 128-bit hash per (name, digest) entry: independent of order, and
updated in O(changed) when a snapshot is derived from the previous one (`Snapshot.with_changes`), so one endpoint
change at 10,000 clusters does not rehash the other 9,999.

A derived snapshot also remembers which names changed since the snapshots it came from (`Snapshot.changed_since`):
a Delta stream that sent an older snapshot then looks at those names only, instead of comparing every resource.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping

import attrs
import immutables
from google.protobuf import any_pb2
from google.protobuf.message import Message

from aether.core.errors import InternalError

_PREFIX = "type.googleapis.com/"
CLUSTER_TYPE = _PREFIX + "envoy.config.cluster.v3.Cluster"
ENDPOINT_TYPE = _PREFIX + "envoy.config.endpoint.v3.ClusterLoadAssignment"
LISTENER_TYPE = _PREFIX + "envoy.config.listener.v3.Listener"
ROUTE_TYPE = _PREFIX + "envoy.config.route.v3.RouteConfiguration"
SECRET_TYPE = _PREFIX + "envoy.extensions.transport_sockets.tls.v3.Secret"

TYPE_ORDER: tuple[str, ...] = (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE)
"""The order Envoy needs resources in over ADS: a cluster before its endpoints, a listener before its routes.
Secrets last: SDS is requested by clusters and listeners that already exist."""

REFERENCED_TYPES = {CLUSTER_TYPE: ENDPOINT_TYPE, LISTENER_TYPE: ROUTE_TYPE}
"""The type the `references` of each referring type's resources name (a cluster's CLA, a listener's routes)."""

WILDCARD_TYPES = frozenset((CLUSTER_TYPE, LISTENER_TYPE))
"""Types Envoy subscribes to as a whole (wildcard); the others it asks for by name."""

SHORT_NAMES = {
    CLUSTER_TYPE: "CDS",
    ENDPOINT_TYPE: "EDS",
    LISTENER_TYPE: "LDS",
    ROUTE_TYPE: "RDS",
    SECRET_TYPE: "SDS",
}


def _entry_hash(name: str, digest: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{name} {digest}".encode(), digest_size=16).digest(), "big")


MAX_LINEAGE = 64
"""How many derivations a snapshot remembers the changed names of (`Snapshot.changed_since`)."""

MAX_LINEAGE_NAMES = 4096
"""How many changed names a snapshot's lineage holds at most: beyond, a consumer compares everything (as cheap)."""


class _Lineage:
    """One derivation step: the snapshot derived from (by its `token`) and the (type URL, name) pairs it changed.

    Records chain to the derivations before, so a consumer holding a snapshot a few steps back still finds it, even
    when the snapshots in between are gone (only the records stay, holding names, never resources).
    """

    __slots__ = ("changed", "depth", "names", "parent", "previous")
    parent: object
    """The `token` of the snapshot derived from: its identity, without keeping the snapshot alive."""
    changed: frozenset[tuple[str, str]]
    previous: _Lineage | None
    depth: int
    """Records in the chain, this one included (at most `MAX_LINEAGE`)."""
    names: int
    """Names the chain lists, this record's included (at most `MAX_LINEAGE_NAMES` plus this record's)."""

    def __init__(
        self, parent: Snapshot, changed: frozenset[tuple[str, str]], previous: _Lineage | None
    ) -> None:
        self.parent = parent.token
        self.changed = changed
        if previous is not None and (
            previous.depth >= MAX_LINEAGE or previous.names + len(changed) > MAX_LINEAGE_NAMES
        ):
            previous = None
        self.previous = previous
        self.depth = 1 if previous is None else previous.depth + 1
        self.names = len(changed) + (0 if previous is None else previous.names)


def _format_version(aggregate: int) -> str:
    return f"{aggregate:032x}"[:16]


PIECES_PERSON = b"aether.pieces"
"""The blake2b personalization of a pieced resource's digest: it is never the digest of some bytes by construction."""


@attrs.frozen(kw_only=True, slots=True, weakref_slot=False)
class Piece:
    """A run of a resource's serialized bytes made once and shared by reference (a service's virtual hosts, held by
    both mesh route tables), with its digest, computed once where it is made: a piece of bytes (`Piece.of`) or a
    group of pieces (`Piece.group`: the bytes of its members, in order)."""

    parts: tuple[bytes, ...] = attrs.field(eq=False, repr=False)
    """The bytes of a piece of bytes, in consecutive non-empty parts (themselves possibly shared with other pieces
    and resources); empty for a group."""
    digest: bytes
    """16 bytes: blake2b-128 of the parts joined, or of a group, over its members' digests (see the module
    docstring). A piece is compared by it."""
    size: int = attrs.field(eq=False)
    """The length of its bytes."""
    members: tuple[Piece, ...] = attrs.field(default=(), eq=False, repr=False)
    """A group's non-empty pieces, in order (empty for a piece of bytes)."""

    @classmethod
    def of(cls, parts: Iterable[bytes]) -> Piece:
        """Return the piece of `parts` joined, hashing them once."""
        kept = tuple(part for part in parts if part)
        digest = hashlib.blake2b(digest_size=16)
        for part in kept:
            digest.update(part)
        return cls(parts=kept, digest=digest.digest(), size=sum(map(len, kept)))

    @classmethod
    def group(cls, pieces: Iterable[Piece]) -> Piece:
        """Return the group of `pieces` (the empty ones left out), hashing their digests, never their bytes."""
        kept = tuple(filter(_piece_size, pieces))
        return cls(
            parts=(),
            digest=_group_digest(kept),
            size=sum(map(_piece_size, kept)),
            members=kept,
        )

    def chunks(self) -> Iterator[bytes]:
        """Yield the piece's bytes, in order (a group's: its members')."""
        if self.members:
            for member in self.members:
                yield from member.chunks()
        else:
            yield from self.parts


_piece_digest = operator.attrgetter("digest")
_piece_size = operator.attrgetter("size")


def _group_digest(kept: Iterable[Piece]) -> bytes:
    return hashlib.blake2b(b"".join(map(_piece_digest, kept)), digest_size=16, person=PIECES_PERSON).digest()


EMPTY_PIECE = Piece.of(())
"""No bytes: a group or resource assembled from pieces leaves it out (its digest does not change)."""


def pieces_digest(pieces: Iterable[Piece]) -> str:
    """Return the digest of a resource assembled from `pieces` (hex): the digest of their group, over the non-empty
    pieces' digests, in order. Never reads the pieces' bytes: O(pieces), whatever their size."""
    return _group_digest(filter(_piece_size, pieces)).hex()


@attrs.frozen(kw_only=True, slots=True, weakref_slot=False)
class Resource:
    """One Envoy resource, serialized once: the bytes every push reuses and the digest that versions it.

    Only the bytes are kept, never the message they came from nor a packed copy of them: at 10,000 services a
    snapshot is tens of megabytes of bytes, and a second copy of each would double it. The bytes may be kept in
    `parts` that other resources share (clusters of one kind share their common fields), or in `pieces` (the two
    mesh route tables hold the same virtual hosts: each keeps the services' pieces by reference); `body` joins
    them when asked.
    """

    type_url: str
    name: str
    parts: tuple[bytes, ...] = attrs.field(eq=False, repr=False)
    """The resource message serialized deterministically (the `value` of its `Any`), in consecutive parts that
    may be shared with other resources (empty when it is made of `pieces`). Not compared: `digest` stands for
    them."""
    digest: str
    """The resource's version in Delta xDS, hex: blake2b-128 of `body`, or for a resource made of `pieces` the
    digest over theirs (`pieces_digest`, see the module docstring)."""
    references: tuple[str, ...] = ()
    """Names of resources of the dependent type this one needs (a cluster's CLA, a listener's route configs)."""
    entry_hash: int = attrs.field(eq=False, repr=False)
    """This resource's share of its type's version (see the module docstring)."""
    pieces: tuple[Piece, ...] = attrs.field(default=(), eq=False, repr=False)
    """The resource's bytes as shared pieces, each hashed once where it was made (`from_pieces`); empty for a
    resource kept in `parts`."""

    @entry_hash.default
    def _entry_hash_default(self) -> int:
        return _entry_hash(self.name, self.digest)

    @property
    def body(self) -> bytes:
        """The resource message serialized (`parts` or `pieces` joined)."""
        if self.pieces:
            return b"".join(itertools.chain.from_iterable(piece.chunks() for piece in self.pieces))
        parts = self.parts
        return parts[0] if len(parts) == 1 else b"".join(parts)

    @property
    def size(self) -> int:
        """`len(body)`, without joining the parts."""
        if self.pieces:
            return sum(map(_piece_size, self.pieces))
        return sum(map(len, self.parts))

    @property
    def packed(self) -> any_pb2.Any:
        """The resource in an `Any` (built for each push: the snapshot keeps the bytes once, in `parts`)."""
        return any_pb2.Any(type_url=self.type_url, value=self.body)

    def pack_into(self, target: any_pb2.Any) -> None:
        """Fill `target` (an `Any` inside a response being built) with this resource: one copy of its bytes."""
        target.type_url = self.type_url
        target.value = self.body

    @classmethod
    def from_message(cls, message: Message, *, references: Iterable[str] = ()) -> Resource:
        """Serialize `message` (a Cluster, ClusterLoadAssignment, Listener, RouteConfiguration or Secret)."""
        full_name = message.DESCRIPTOR.full_name
        type_url = _PREFIX + full_name
        if type_url not in SHORT_NAMES:
            raise InternalError(detail=f"{full_name!r} is not a resource type the snapshot serves")
        name = message.cluster_name if type_url == ENDPOINT_TYPE else message.name  # type: ignore[attr-defined]
        body = message.SerializeToString(deterministic=True)
        return cls.from_body(type_url, name=name, body=body, references=references)

    @classmethod
    def from_body(cls, type_url: str, *, name: str, body: bytes, references: Iterable[str] = ()) -> Resource:
        """Return the resource whose serialized message is `body` (assembled from cached parts, not re-serialized).

        The caller guarantees `body` is what `from_message` would serialize; this, `from_parts` and `from_pieces`
        are the only places resource digests are made.
        """
        return cls.from_parts(type_url, name=name, parts=(body,), references=references)

    @classmethod
    def from_parts(
        cls, type_url: str, *, name: str, parts: Iterable[bytes], references: Iterable[str] = ()
    ) -> Resource:
        """Return the resource whose serialized message is `parts` joined, keeping the parts themselves (shared by
        reference with whatever else holds them) rather than one joined copy."""
        kept = tuple(part for part in parts if part)
        digest = hashlib.blake2b(digest_size=16)
        for part in kept:
            digest.update(part)
        return cls(
            type_url=type_url,
            name=name,
            parts=kept or (b"",),
            digest=digest.hexdigest(),
            references=tuple(references),
        )

    @classmethod
    def from_pieces(
        cls, type_url: str, *, name: str, pieces: Iterable[Piece], references: Iterable[str] = ()
    ) -> Resource:
        """Return the resource whose serialized message is `pieces` joined, keeping the pieces by reference.

        Its digest is `pieces_digest(pieces)`: the pieces' bytes are not read (they were hashed when made), so
        assembling a table of 10,000 shared pieces costs O(pieces), not O(bytes). The caller cuts the pieces as a
        function of content (the split is part of the digest: see the module docstring).
        """
        kept = tuple(filter(_piece_size, pieces))
        return cls(
            type_url=type_url,
            name=name,
            parts=() if kept else (b"",),
            digest=pieces_digest(kept),
            references=tuple(references),
            pieces=kept,
        )


def version_of(digests: Mapping[str, str]) -> str:
    """Return the version of a set of resources given as name → digest ("" when empty)."""
    aggregate = 0
    for name, digest in digests.items():
        aggregate ^= _entry_hash(name, digest)
    return _format_version(aggregate) if digests else ""


def aggregate_version(aggregate: int, *, count: int) -> str:
    """Return the version of `count` resources whose entry hashes XOR to `aggregate` ("" when there are none)."""
    return _format_version(aggregate) if count else ""


def type_version(resources: Iterable[Resource]) -> str:
    """Return the version of a set of resources: the same value `version_of` gives for their names and digests."""
    aggregate, empty = 0, True
    for resource in resources:
        aggregate ^= resource.entry_hash
        empty = False
    return "" if empty else _format_version(aggregate)


@attrs.frozen(kw_only=True)
class Snapshot:
    """Everything one node's Envoy should hold, by type URL and name.

    `seq` is the log position the snapshot was projected at; versions never depend on it, only on content.
    """

    node_id: str
    seq: int = 0
    resources: immutables.Map[str, immutables.Map[str, Resource]] = immutables.Map()
    not_found: frozenset[str] = frozenset()
    """Cluster names asked for on demand that no mesh service matches: answered as removed, never left hanging."""
    aggregates: immutables.Map[str, int] = immutables.Map()
    """Per type URL, the XOR of its resources' entry hashes. Invariant: always matches `resources`."""
    referenced: immutables.Map[tuple[str, str], int] = immutables.Map()
    """Per (type URL, name), how many references the referring resources make to it (see `REFERENCED_TYPES`).
    Invariant: always matches `resources`."""
    dangling: immutables.Map[tuple[str, str], int] = immutables.Map()
    """The entries of `referenced` whose resource the snapshot lacks: while empty, `consistent()` costs O(1).
    Invariant: always matches `resources`."""
    lineage: _Lineage | None = attrs.field(default=None, eq=False, repr=False)
    """How this snapshot was derived (`with_changes`): not part of its value, only a shortcut for `changed_since`."""
    token: object = attrs.field(init=False, factory=object, eq=False, repr=False)
    """This snapshot's identity for `changed_since` (a lineage names its parent by it, holding no resources); not
    copied by `attrs.evolve`, so a snapshot changed that way is never taken for its original."""

    @classmethod
    def build(
        cls, *, node_id: str, seq: int = 0, resources: Iterable[Resource], not_found: Iterable[str] = ()
    ) -> Snapshot:
        """Return a snapshot holding `resources` (the last of two with the same type and name wins)."""
        grouped: dict[str, dict[str, Resource]] = {}
        for resource in resources:
            grouped.setdefault(resource.type_url, {})[resource.name] = resource
        maps = immutables.Map({type_url: immutables.Map(items) for type_url, items in grouped.items()})
        aggregates = {}
        for type_url, items in grouped.items():
            aggregate = 0
            for resource in items.values():
                aggregate ^= resource.entry_hash
            aggregates[type_url] = aggregate
        referenced: dict[tuple[str, str], int] = {}
        for type_url, needed in REFERENCED_TYPES.items():
            for resource in grouped.get(type_url, {}).values():
                for name in resource.references:
                    referenced[needed, name] = referenced.get((needed, name), 0) + 1
        return cls(
            node_id=node_id,
            seq=seq,
            resources=maps,
            not_found=frozenset(not_found),
            aggregates=immutables.Map(aggregates),
            referenced=immutables.Map(referenced),
            dangling=immutables.Map(
                {key: count for key, count in referenced.items() if key[1] not in grouped.get(key[0], {})}
            ),
        )

    def with_changes(
        self,
        *,
        seq: int,
        upserted: Iterable[Resource] = (),
        removed: Iterable[tuple[str, str]] = (),
        not_found: Iterable[str] | None = None,
    ) -> Snapshot:
        """Return the snapshot at `seq` with `upserted` resources set and `removed` (type URL, name) pairs gone.

        Costs O(changed): the maps are shared with this snapshot and versions are updated, not recomputed.
        """
        maps = self.resources.mutate()
        aggregates = self.aggregates.mutate()
        references = _References(self.referenced.mutate())
        for type_url, name in removed:
            held = maps.get(type_url)
            if held is not None and name in held:
                references.count(held[name], -1)
                remaining = held.delete(name)
                if remaining:
                    aggregates[type_url] = aggregates.get(type_url, 0) ^ held[name].entry_hash
                    maps[type_url] = remaining
                else:  # as `build` would have it: a type without resources has no entry
                    del maps[type_url]
                    del aggregates[type_url]
        for resource in upserted:
            held = maps.get(resource.type_url, _EMPTY)
            aggregate = aggregates.get(resource.type_url, 0)
            previous = held.get(resource.name)
            if previous is not None:
                aggregate ^= previous.entry_hash
                references.count(previous, -1)
            references.count(resource, 1)
            aggregates[resource.type_url] = aggregate ^ resource.entry_hash
            maps[resource.type_url] = held.set(resource.name, resource)
        resources = maps.finish()
        final_not_found = self.not_found if not_found is None else frozenset(not_found)
        changed = set(references.touched)
        changed.update((CLUSTER_TYPE, name) for name in final_not_found ^ self.not_found)
        return Snapshot(
            node_id=self.node_id,
            seq=seq,
            resources=resources,
            not_found=final_not_found,
            aggregates=aggregates.finish(),
            referenced=references.counts.finish(),
            dangling=references.dangling(self.dangling, resources),
            lineage=_Lineage(self, frozenset(changed), self.lineage),
        )

    def changed_since(self, older: Snapshot) -> dict[str, set[str]] | None:
        """Return, by type URL, the names whose resource (or not-found mark) may differ between `older` and this one.

        None when this snapshot does not know (it was not derived from `older` within its remembered lineage): the
        caller then compares everything. Names listed may be unchanged (changed back); names not listed are equal.
        Costs O(changed), never O(resources).
        """
        changed: dict[str, set[str]] = {}
        record = self.lineage
        if self is older:
            return changed
        while record is not None:
            for type_url, name in record.changed:
                changed.setdefault(type_url, set()).add(name)
            if record.parent is older.token:
                return changed
            record = record.previous
        return None

    def of_type(self, type_url: str) -> Mapping[str, Resource]:
        """Return the resources of `type_url` by name (empty when the snapshot has none)."""
        return self.resources.get(type_url, _EMPTY)

    def version(self, type_url: str) -> str:
        """Return the version of all resources of `type_url` (the SotW version of a wildcard subscription), in O(1)."""
        if not self.of_type(type_url):
            return ""
        return _format_version(self.aggregates.get(type_url, 0))

    def consistent(self) -> tuple[str, ...]:
        """Return every dangling reference (empty: consistent).

        Each EDS cluster's load assignment must be in the snapshot, and so must each listener's route
        configuration; otherwise Envoy would wait for it until its initial fetch timeout.
        O(1) for a consistent snapshot (`dangling` is empty); a scan of the referring resources otherwise.
        """
        if not self.dangling:
            return ()
        problems: list[str] = []
        for type_url, needed in ((CLUSTER_TYPE, ENDPOINT_TYPE), (LISTENER_TYPE, ROUTE_TYPE)):
            held = self.of_type(needed)
            for name, resource in sorted(self.of_type(type_url).items()):
                problems.extend(
                    f"{SHORT_NAMES[type_url]} {name!r} needs {SHORT_NAMES[needed]} {reference!r}, which is missing"
                    for reference in resource.references
                    if reference not in held
                )
        return tuple(problems)


_EMPTY: immutables.Map[str, Resource] = immutables.Map()


class _References:
    """`Snapshot.referenced` being updated by `with_changes`, and the keys whose dangling state may have changed."""

    def __init__(self, counts: immutables.MapMutation[tuple[str, str], int]) -> None:
        self.counts = counts
        self.touched: set[tuple[str, str]] = set()

    def count(self, resource: Resource, step: int) -> None:
        """Add (1) or take away (-1) the references `resource` makes, and note that it came or went."""
        self.touched.add((resource.type_url, resource.name))
        needed = REFERENCED_TYPES.get(resource.type_url)
        if needed is None:
            return
        for name in resource.references:
            key = (needed, name)
            total = self.counts.get(key, 0) + step
            if total:
                self.counts[key] = total
            else:
                del self.counts[key]
            self.touched.add(key)

    def dangling(
        self,
        before: immutables.Map[tuple[str, str], int],
        resources: immutables.Map[str, immutables.Map[str, Resource]],
    ) -> immutables.Map[tuple[str, str], int]:
        """Return `before` updated for the touched keys: O(changed)."""
        dangling = before.mutate()
        for key in self.touched:
            total = self.counts.get(key, 0)
            if total and key[1] not in resources.get(key[0], _EMPTY):
                dangling[key] = total
            elif key in dangling:
                del dangling[key]
        return dangling.finish()
