"""Route precedence, exactly as the Gateway API specifies it, and the conflicts it resolves.

Across all rules of the routes that apply to one host (an edge domain, or a mesh service), HTTP matches are tried:

1. most characters in the matching non-wildcard route hostname, then in the matching hostname (edge only);
2. an Exact path, then (our choice, the API leaves it open) a RegularExpression path, then a PathPrefix,
   the longer first (a trailing `/` not counted; `/` counts none);
3. a method match;
4. more header matches, then more query parameter matches;
5. ties across routes: the oldest creationTimestamp, then `<namespace>/<name>`;
6. ties within a route: rule order, then match order.

gRPC matches (never merged with HTTP ones) use the hostname, then the longer exact service, then the longer exact
method (exact before regular expression), then more header matches, then the same tie-breakers.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import TypeVar

from aether.core.gateway.entries import Entry
from aether.core.gateway.hostnames import specificity
from aether.core.gateway.model.matches import EXACT, PATH_PREFIX, REGULAR_EXPRESSION, GRPCMatch, HTTPMatch

_PATH_RANK = {EXACT: 2, REGULAR_EXPRESSION: 1, PATH_PREFIX: 0}


def match_key(match: HTTPMatch | GRPCMatch) -> tuple[int, ...]:
    """Return the sort key of a match alone (smaller first)."""
    if isinstance(match, HTTPMatch):
        path = match.path
        length = len(path.value.rstrip("/")) if path.type == PATH_PREFIX else len(path.value)
        return (
            -_PATH_RANK[path.type],
            -length,
            -int(bool(match.method)),
            -len(match.headers),
            -len(match.query_params),
        )
    exact = match.type == EXACT
    return (
        -int(exact and bool(match.service)),
        -len(match.service),
        -int(exact and bool(match.method)),
        -len(match.method),
        -len(match.headers),
    )


def entry_key(entry: Entry) -> tuple[object, ...]:
    """Return the full precedence key of an entry (smaller first), flat (its parts have fixed lengths per match
    kind, so it orders as the nested key would, and compares faster)."""
    characters, wildcard_characters = specificity(entry.host) if entry.host else (0, 0)
    return (
        -characters,
        -wildcard_characters,
        *match_key(entry.match),
        *entry.route.age,
        entry.rule.index,
        entry.match_index,
    )


def ordered(entries: Iterable[Entry]) -> tuple[list[Entry], list[tuple[Entry, Entry]]]:
    """Return the entries in precedence order without the shadowed ones, and the shadowed ones with their winner.

    Two entries with the same match through the same route hostname can never both be reached: the one precedence
    puts first (the older route) keeps it, and the other is dropped and reported against its route. Within one
    route an earlier rule wins silently (the API's "first matching rule").
    """
    kept: list[Entry] = []
    shadowed: list[tuple[Entry, Entry]] = []
    for entry, winner in claims(
        ((entry.host, entry.match), entry) for entry in sorted(entries, key=entry_key)
    ):
        if winner is None:
            kept.append(entry)
        elif winner.route.key != entry.route.key:
            shadowed.append((entry, winner))
    return kept, shadowed


T = TypeVar("T")


def claims(items: Iterable[tuple[Hashable, T]]) -> Iterator[tuple[T, T | None]]:
    """Yield each of `items` (`(identity, item)` in precedence order, the identity being an entry's route hostname
    and match, or a stand-in as unique) with the earlier item that claimed the same identity (None: it claims it)."""
    claimed: dict[Hashable, T] = {}
    for identity, item in items:
        winner = claimed.get(identity)
        if winner is None:
            claimed[identity] = item
        yield item, winner


def shadow_note(scope: str, loser: Entry, winner: Entry) -> str:
    """Return the status message of an entry dropped because an older route claims the same match."""
    return (
        f"{scope}: spec.rules[{loser.rule.index}].matches[{loser.match_index}] is already claimed by "
        f"{winner.route.key} (older, or first by namespace/name)"
    )
