"""Tests of `aether.core.project.route_groups`: content-defined groups of the route tables' virtual-host pieces."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether.core.project.route_groups import RouteGroups
from aether.core.snapshot import Piece

_UNIVERSE = tuple(f"ns/s{index:02}" for index in range(40))


def _pieces(versions: dict[str, int]) -> dict[str, Piece]:
    """A piece per service (version 0: the service has no virtual hosts)."""
    return {
        service: Piece.of((f"{service}@{version}".encode(),))
        for service, version in versions.items()
        if version
    }


_EDITS = st.lists(st.tuples(st.sampled_from(_UNIVERSE), st.integers(-1, 2)), min_size=1, max_size=4)
"""A few services leaving (-1), joining or changing their piece (version 0: no virtual hosts)."""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.dictionaries(st.sampled_from(_UNIVERSE), st.integers(0, 2), max_size=len(_UNIVERSE)),
    steps=st.lists(_EDITS, min_size=1, max_size=8),
)
def test_groups_updated_step_by_step_are_the_groups_of_the_set_made_whole(
    start: dict[str, int], steps: list[list[tuple[str, int]]]
) -> None:
    """Services joining, leaving and changing their pieces (small groups: one name in 3 ends one): the groups
    updated from the touched services only are, piece for piece, those of the same set grouped from scratch; and
    their members, in order, are the set's pieces."""
    groups = RouteGroups(every=3)
    held: dict[str, int] = {}
    for edits in [[*start.items()], *steps]:
        step = dict(held)
        for service, version in edits:
            if version < 0:
                step.pop(service, None)
            else:
                step[service] = version
        services = tuple(sorted(step))
        touched = {service for service in {*held, *step} if held.get(service) != step.get(service)}
        pieces = _pieces(step)
        updated = groups.update(services, pieces, touched=touched)
        whole = RouteGroups(every=3).update(services, pieces, touched=None)
        assert updated == whole
        assert [member for group in updated for member in group.members] == [
            pieces[service] for service in services if service in pieces
        ]
        held = step


def test_a_group_ends_after_each_cut_and_a_change_regroups_its_own_group_only() -> None:
    """At 40 services in groups of about 3, one service changing its piece re-groups its own group (and the next
    one, when it is the cut between them): every other group stays the same object."""
    services = _UNIVERSE
    versions = dict.fromkeys(services, 1)
    groups = RouteGroups(every=3)
    before = groups.update(services, _pieces(versions), touched=None)
    assert 5 < len(before) < 40
    versions["ns/s17"] = 2
    after = groups.update(services, _pieces(versions), touched={"ns/s17"})
    changed = [index for index, (old, new) in enumerate(zip(before, after, strict=True)) if old is not new]
    assert changed in ([changed[0]], [changed[0], changed[0] + 1])
    assert Piece.of((b"ns/s17@2",)) in after[changed[0]].members
