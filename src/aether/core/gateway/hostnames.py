"""Hostname arithmetic of the Gateway API: wildcard coverage, listener/route intersection, specificity."""

from __future__ import annotations

from collections.abc import Iterable

ANY_HOST = "*"
"""The domain of a listener and route that both name no hostname: every host."""


def covers(pattern: str, host: str) -> bool:
    """True when `pattern` (`*`, `*.example.com` or exact) matches every name `host` (exact or wildcard) matches.

    A wildcard label matches one or more labels: `*.example.com` covers `a.example.com`, `a.b.example.com` and
    `*.a.example.com`, never `example.com`.
    """
    if pattern in (ANY_HOST, host):
        return True
    if pattern.startswith("*."):
        suffix = pattern[1:]
        return host.endswith(suffix) and len(host) > len(suffix) and host != ANY_HOST
    return False


def intersect(listener: str, route: Iterable[str]) -> tuple[str, ...]:
    """Return the hostnames a route serves on a listener: the most specific name of each intersecting pair, sorted.

    An empty listener hostname admits the route's names (or every host when it has none); a route with no names
    takes the listener's. A route whose names all miss a hostname-bearing listener gets nothing (it is then not
    accepted there, `NoMatchingListenerHostname`).
    """
    names = tuple(route)
    if not listener:
        return tuple(sorted(set(names))) if names else (ANY_HOST,)
    if not names:
        return (listener,)
    kept = set()
    for name in names:
        if covers(listener, name):
            kept.add(name)
        elif covers(name, listener):
            kept.add(listener)
    return tuple(sorted(kept))


def specificity(host: str) -> tuple[int, int]:
    """Return the Gateway API's hostname precedence key of a matching hostname, larger first.

    Characters in a matching non-wildcard hostname, then characters in a matching hostname (`*` counts none).
    """
    if host == ANY_HOST:
        return (0, 0)
    return (0 if host.startswith("*") else len(host), len(host))
