"""The middle of the mesh route tables: the services' virtual-host pieces in content-defined groups.

A table of 10,000 services is not one flat sequence of 10,000 pieces (each change would touch every one of them to
gather their digests: O(set), and cache misses at that), but groups of about `GROUP_EVERY` consecutive services
(in set order): a group ends after each service whose name hashes to a multiple of `GROUP_EVERY` (a "cut"), and
the last group at the set's end. The groups are a function of the set alone, so a set reached step by step is
grouped as the same set projected whole (the table's digest, a hash tree over groups, is the same); and a service
joining, leaving or changing its virtual hosts re-groups only its own group (and the next one, when it was the
cut between them): O(changed x GROUP_EVERY + groups), not O(set).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Collection, Mapping

from aether.core.snapshot import Piece

GROUP_EVERY = 64
"""The mean group size: one service in this many (by name hash) ends a group."""

_MANY = 256
"""Beyond this many touched services, the groups are rebuilt whole (as cheap)."""


def _is_cut(service: str, every: int) -> bool:
    """Whether `service` ends its group: its name hashes (blake2b, the same in every process) to a multiple of
    `every`."""
    return int.from_bytes(hashlib.blake2b(service.encode(), digest_size=8).digest(), "big") % every == 0


class RouteGroups:
    """The groups of one dependency set's virtual-host pieces, updated for the services that changed.

    A deterministic memo (as `NodeProjector`): `update` returns what grouping the set from scratch returns."""

    def __init__(self, *, every: int = GROUP_EVERY) -> None:
        self._every = every
        self._cuts: dict[str, bool] = {}
        """Per service seen, whether it ends its group (its name's hash: computed once)."""
        self._ends: list[str] = []
        """The last service of each group, ascending (every group's but the last is a cut)."""
        self._members: list[tuple[str, ...]] = []
        """The services of each group (with or without virtual hosts), in set order."""
        self._groups: list[Piece] = []
        """Each group's piece: its services' pieces, grouped."""

    @property
    def groups(self) -> tuple[Piece, ...]:
        """The groups, in set order (empty ones included: a table leaves them out)."""
        return tuple(self._groups)

    def update(
        self, services: tuple[str, ...], pieces: Mapping[str, Piece], *, touched: Collection[str] | None
    ) -> tuple[Piece, ...]:
        """Return the groups of `services` (sorted, distinct), each of the `pieces` of its services.

        `touched`: the services that joined or left the set or whose piece changed since the last call (None: do not
        know, group everything again). Every other service must have the piece it had then.
        """
        if touched is None or not self._ends or len(touched) > _MANY:
            held = self._cuts
            self._cuts = {service: cut for service in services if (cut := held.get(service)) is not None}
            self._ends, self._members, self._groups = [], [], []
            self._regroup(0, services, pieces)
            return self._kept_one()
        for (
            service
        ) in touched:  # those that left the set are forgotten (the next to come hashes its name again)
            at = bisect.bisect_left(services, service)
            if at == len(services) or services[at] != service:
                self._cuts.pop(service, None)
        ends = self._ends
        last = len(ends) - 1
        affected: set[int] = set()
        for service in touched:
            at = min(bisect.bisect_left(ends, service), last)
            affected.add(at)
            if ends[at] == service and at < last:  # a cut that may have left: its group merges with the next
                affected.add(at + 1)
        runs: list[tuple[int, int]] = []
        for at in sorted(affected):
            if runs and runs[-1][1] == at - 1:
                runs[-1] = (runs[-1][0], at)
            else:
                runs.append((at, at))
        for first, end in reversed(runs):  # from the end: the indexes before a run stay valid
            low = bisect.bisect_right(services, ends[first - 1]) if first else 0
            high = bisect.bisect_right(services, ends[end]) if end < last else len(services)
            del self._ends[first : end + 1], self._members[first : end + 1], self._groups[first : end + 1]
            self._regroup(first, services[low:high], pieces)
        return self._kept_one()

    def _kept_one(self) -> tuple[Piece, ...]:
        if not self._ends:  # an empty set: one empty group, so that the next call has a group to update
            self._ends, self._members, self._groups = [""], [()], [Piece.group(())]
        return self.groups

    def _regroup(self, at: int, services: tuple[str, ...], pieces: Mapping[str, Piece]) -> None:
        """Insert at index `at` the groups of the consecutive `services` (a run ending on a cut, or the set's end)."""
        cuts, every = self._cuts, self._every
        ends: list[str] = []
        members: list[tuple[str, ...]] = []
        start = 0
        for index, service in enumerate(services):
            cut = cuts.get(service)
            if cut is None:
                cut = cuts[service] = _is_cut(service, every)
            if cut:
                ends.append(service)
                members.append(services[start : index + 1])
                start = index + 1
        if start < len(services):  # the set's end (a run ends on a cut otherwise)
            ends.append(services[-1])
            members.append(services[start:])
        groups = [Piece.group(filter(None, map(pieces.get, group))) for group in members]
        self._ends[at:at] = ends
        self._members[at:at] = members
        self._groups[at:at] = groups
