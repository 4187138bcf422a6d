"""`Snapshot.with_changes` keeps the reference counts that make `consistent()` O(1): after any sequence of changes the
snapshot equals the one `build` gives for its resources, and `consistent()` reports exactly the dangling references
a scan finds."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from aether.core.snapshot import REFERENCED_TYPES, ROUTE_TYPE, SHORT_NAMES, Piece, Resource, Snapshot
from property_tests.strategies import snapshot_changes

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _scanned(snapshot: Snapshot) -> tuple[str, ...]:
    """The dangling references, found by looking at every referring resource (what `consistent` must say)."""
    return tuple(
        f"{SHORT_NAMES[type_url]} {name!r} needs {SHORT_NAMES[needed]} {reference!r}, which is missing"
        for type_url, needed in REFERENCED_TYPES.items()
        for name, resource in sorted(snapshot.of_type(type_url).items())
        for reference in resource.references
        if reference not in snapshot.of_type(needed)
    )


@PROPERTY
@given(steps=st.lists(snapshot_changes(), max_size=12))
def test_incremental_changes_keep_the_consistency_check_exact(
    steps: list[tuple[tuple[Resource, ...], tuple[tuple[str, str], ...]]],
) -> None:
    """Each step's snapshot equals a build of its resources, and its `consistent()` equals the scan."""
    snapshot = Snapshot.build(node_id="node-a", resources=())
    for seq, (upserted, removed) in enumerate(steps, 1):
        snapshot = snapshot.with_changes(seq=seq, upserted=upserted, removed=removed)
        held = [resource for items in snapshot.resources.values() for resource in items.values()]
        assert snapshot == Snapshot.build(node_id="node-a", seq=seq, resources=held)
        assert snapshot.consistent() == _scanned(snapshot)
    event("ends inconsistent" if snapshot.dangling else "ends consistent")


@PROPERTY
@given(st.lists(snapshot_changes(), max_size=12))
def test_changed_since_names_every_resource_that_differs(
    steps: list[tuple[tuple[Resource, ...], tuple[tuple[str, str], ...]]],
) -> None:
    """Between any snapshot of a chain of `with_changes` and the newest, every differing name is listed."""
    chain = [Snapshot.build(node_id="node-a", resources=())]
    for seq, (upserted, removed) in enumerate(steps, 1):
        chain.append(chain[-1].with_changes(seq=seq, upserted=upserted, removed=removed))
    newest = chain[-1]
    for older in chain:
        changed = newest.changed_since(older)
        assert changed is not None
        for type_url in set(older.resources) | set(newest.resources):
            before, after = older.of_type(type_url), newest.of_type(type_url)
            differing = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
            assert differing <= changed.get(type_url, set())
    assert newest.changed_since(Snapshot.build(node_id="node-a", resources=())) is None


@PROPERTY
@given(
    first=st.lists(st.lists(st.binary(max_size=6), max_size=3), max_size=6),
    second=st.lists(st.lists(st.binary(max_size=6), max_size=3), max_size=6),
)
def test_a_pieced_resource_s_digest_is_a_function_of_its_pieces_bytes(
    first: list[list[bytes]], second: list[list[bytes]]
) -> None:
    """Pieces (each given as parts) assembled into a resource: its bytes are theirs joined, and two resources have
    the same digest exactly when their non-empty pieces hold the same bytes in the same order (however each piece
    is cut into parts, and wherever empty pieces fall)."""

    def assembled(pieces: list[list[bytes]]) -> Resource:
        return Resource.from_pieces(ROUTE_TYPE, name="t", pieces=[Piece.of(parts) for parts in pieces])

    def content(pieces: list[list[bytes]]) -> list[bytes]:
        return [joined for parts in pieces if (joined := b"".join(parts))]

    one, other = assembled(first), assembled(second)
    assert one.body == b"".join(content(first))
    assert one.size == len(one.body)
    assert one == assembled([list(parts) for parts in first])  # made again from equal bytes: the same version
    # The same pieces cut into other parts, with empty pieces between them: the same version.
    recut = [[b"".join(parts)[:1], b"".join(parts)[1:]] for parts in first]
    assert one == assembled([[], *(item for parts in recut for item in (parts, [b""]))])
    assert (one.digest == other.digest) == (content(first) == content(second))
    event("same pieces" if content(first) == content(second) else "other pieces")
