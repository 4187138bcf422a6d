"""Snapshots: resources serialized once, content-hash versions, incremental changes, consistency."""

from __future__ import annotations

import hashlib

import immutables
import pytest
from google.protobuf import any_pb2

from aether.core.errors import InternalError
from aether.core.snapshot import (
    CLUSTER_TYPE,
    EMPTY_PIECE,
    ENDPOINT_TYPE,
    PIECES_PERSON,
    ROUTE_TYPE,
    Piece,
    Resource,
    Snapshot,
    pieces_digest,
    type_version,
    version_of,
)
from tests.xds._snapshots import NODE, assignment, cluster, snapshot


def test_versions_depend_on_content_only() -> None:
    """The same resources in any order give the same versions; seq does not enter them."""
    forward = snapshot(cluster("a"), cluster("b"), seq=1)
    backward = snapshot(cluster("b"), cluster("a"), seq=9)
    assert forward.version(CLUSTER_TYPE) == backward.version(CLUSTER_TYPE) != ""
    assert forward.version(ENDPOINT_TYPE) == ""


def test_type_version_and_version_of_agree_with_the_snapshot() -> None:
    """A set's version is the same whether computed from resources, from name → digest, or kept by the snapshot."""
    built = snapshot(cluster("a"), cluster("b"))
    held = built.of_type(CLUSTER_TYPE)
    assert (
        type_version(held.values())
        == version_of({n: r.digest for n, r in held.items()})
        == built.version(CLUSTER_TYPE)
    )


def test_with_changes_equals_building_from_scratch() -> None:
    """An incremental change (upsert, replace, remove the last of a type) gives the snapshot `build` gives."""
    base = snapshot(cluster("a"), cluster("b"), assignment("a", 1), assignment("b", 2))
    changed = base.with_changes(
        seq=2,
        upserted=[assignment("a", 7), cluster("c")],
        removed=[(CLUSTER_TYPE, "b"), (ENDPOINT_TYPE, "b"), (ENDPOINT_TYPE, "zzz")],
    )
    assert changed == snapshot(cluster("a"), cluster("c"), assignment("a", 7), seq=2)
    emptied = changed.with_changes(seq=3, removed=[(ENDPOINT_TYPE, "a")])
    assert emptied == snapshot(cluster("a"), cluster("c"), seq=3)


def test_consistency_names_dangling_references() -> None:
    """A cluster whose load assignment is missing is reported, by name."""
    assert snapshot(cluster("a"), cluster("b"), assignment("a", 1)).consistent() == (
        "CDS 'b' needs EDS 'b', which is missing",
    )


def test_a_resource_of_shared_parts_is_the_resource_of_their_bytes() -> None:
    """Parts joined give the same digest, equality and version share as one body."""
    whole = cluster("a")
    body = whole.body
    split = Resource.from_parts(whole.type_url, name="a", parts=(body[:5], b"", body[5:]), references=("a",))
    assert split == whole
    assert split.body == body
    assert split.size == len(body)
    assert split.entry_hash == whole.entry_hash


def test_a_pieced_resource_is_versioned_by_its_pieces_digests_without_reading_their_bytes() -> None:
    """`from_pieces` hashes the pieces' digests, never their bytes: a piece carrying a digest that is not of its
    bytes (made here by hand, to tell the two apart) gives the digest of the rule over that digest."""
    made = Piece.of((b"virtual ", b"host"))
    assert made.digest == hashlib.blake2b(b"virtual host", digest_size=16).digest()
    assert made.size == 12
    forged = Piece(parts=(b"x" * 1000,), digest=bytes(range(16)), size=1000)
    resource = Resource.from_pieces(ROUTE_TYPE, name="t", pieces=(made, EMPTY_PIECE, forged))
    expected = hashlib.blake2b(made.digest + forged.digest, digest_size=16, person=PIECES_PERSON).hexdigest()
    assert resource.digest == pieces_digest((made, forged)) == expected
    assert resource.pieces == (made, forged)  # the empty piece is left out; the others kept by reference
    assert resource.pieces[0] is made
    assert resource.body == b"virtual host" + b"x" * 1000
    assert resource.size == len(resource.body)
    assert resource.entry_hash == Resource.from_pieces(ROUTE_TYPE, name="t", pieces=(made, forged)).entry_hash


def test_a_pieced_resource_is_not_the_resource_of_its_bytes() -> None:
    """The split is part of a pieced resource's digest (by design): its bytes as one body, or cut otherwise, give
    another digest; no pieces at all is the empty message."""
    first, second = Piece.of((b"ab",)), Piece.of((b"cd",))
    pieced = Resource.from_pieces(ROUTE_TYPE, name="t", pieces=(first, second))
    assert pieced.body == b"abcd"
    assert pieced != Resource.from_body(ROUTE_TYPE, name="t", body=b"abcd")
    assert pieced != Resource.from_pieces(ROUTE_TYPE, name="t", pieces=(Piece.of((b"abcd",)),))
    assert pieced != Resource.from_pieces(ROUTE_TYPE, name="t", pieces=(second, first))
    empty = Resource.from_pieces(ROUTE_TYPE, name="t", pieces=(EMPTY_PIECE,))
    assert (empty.body, empty.size) == (b"", 0)


def test_only_served_resource_types_become_resources() -> None:
    """A message of another type is a programming error."""
    from google.protobuf import wrappers_pb2

    with pytest.raises(InternalError, match=r"'google.protobuf.StringValue' is not a resource type"):
        Resource.from_message(wrappers_pb2.StringValue(value="x"))


def test_a_resource_keeps_its_bytes_once() -> None:
    """A resource keeps its serialized bytes only (no message, no packed copy); packing copies them into the Any."""
    resource = cluster("a")
    assert resource.packed.value == resource.body
    assert resource.parts == (resource.body,)
    assert resource.size == len(resource.body)
    target = any_pb2.Any()
    resource.pack_into(target)
    assert target == resource.packed
    assert Snapshot.build(node_id=NODE, resources=[resource]).of_type(CLUSTER_TYPE)["a"] is resource


def test_consistency_follows_incremental_changes() -> None:
    """A removed load assignment dangles until it comes back or its cluster goes; the count is kept per reference."""
    base = snapshot(cluster("a"), assignment("a", 1))
    assert base.consistent() == ()
    removed = base.with_changes(seq=2, removed=[(ENDPOINT_TYPE, "a")])
    assert removed.consistent() == ("CDS 'a' needs EDS 'a', which is missing",)
    assert dict(removed.dangling) == {(ENDPOINT_TYPE, "a"): 1}
    assert removed.with_changes(seq=3, upserted=[assignment("a", 2)]).consistent() == ()
    assert removed.with_changes(seq=3, removed=[(CLUSTER_TYPE, "a")]).dangling == immutables.Map()
