"""The HTTP routing the Gateway API view hands to the projections: typed, Envoy-free values (matches, header
changes, rewrites, redirects, direct responses, weighted destinations, mirrors, retries, routes, virtual hosts).

Like Envoy Gateway's IR (`internal/ir/xds.go`), these say what a route does with every Gateway API rule already
applied (precedence, defaults, the share of unresolved backends, path rewrite semantics, cluster names), so that the
projection (`aether.core.project.gateway_routes`) only spells them as Envoy messages. Two policies stay with the
projection because they belong to the data plane, not to the API: the mesh's retries by outcome
(`aether.core.project.outcome`) and how an edge route retries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from aether.core.mesh_names import SLICE_CLUSTER_PREFIX

# --- matches ---

EXACT = "Exact"
PREFIX = "Prefix"
"""A plain string prefix (`/ab` matches `/abc`)."""
SEGMENT_PREFIX = "SegmentPrefix"
"""A path prefix of whole path segments (`/ab` matches `/ab` and `/ab/c`, not `/abc`); never `/` nor a trailing `/`."""
REGULAR_EXPRESSION = "RegularExpression"
"""An RE2 regular expression, matched against the whole value."""

STRING_KINDS = (EXACT, PREFIX, REGULAR_EXPRESSION)
PATH_KINDS = (EXACT, PREFIX, SEGMENT_PREFIX, REGULAR_EXPRESSION)


@attrs.frozen(kw_only=True)
class StringMatch:
    """A test of one string value."""

    kind: str
    """One of `STRING_KINDS` (`PATH_KINDS` for a path)."""
    value: str


@attrs.frozen(kw_only=True)
class NamedMatch:
    """A test of one request header (names are case-insensitive) or query parameter (names are exact)."""

    name: str
    match: StringMatch


@attrs.frozen(kw_only=True)
class RouteMatch:
    """What a request must have for a route to take it: every test holds."""

    path: StringMatch
    headers: tuple[NamedMatch, ...] = ()
    """In order; pseudo-headers (`:method`) and the gRPC content type included."""
    query_params: tuple[NamedMatch, ...] = ()
    per_million: int | None = None
    """Take only this share of the requests that match, in millionths; None takes every one."""
    caller_namespace: str = ""
    """Take only the requests of callers in this namespace (a GAMMA consumer route's); empty: any caller's."""


# --- what a route does ---

REPLACE_FULL_PATH = "ReplaceFullPath"
REPLACE_PREFIX = "ReplacePrefix"
"""Replace the matched path prefix with `value`."""
REPLACE_REGEX = "ReplaceRegex"
"""Replace what `pattern` (RE2) matches in the path with `value`."""


@attrs.frozen(kw_only=True)
class PathRewrite:
    """How a forwarded or redirected request's path changes."""

    kind: str
    """`ReplaceFullPath`, `ReplacePrefix` or `ReplaceRegex`."""
    value: str
    """The full path, the new prefix, or the substitution."""
    pattern: str = ""
    """`ReplaceRegex` only: the RE2 pattern whose matches are substituted."""


@attrs.frozen(kw_only=True)
class HeaderChanges:
    """Headers to overwrite (`set`), append (`add`) and remove, in the order given (names as the API spelled them)."""

    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()

    def then(self, later: HeaderChanges) -> HeaderChanges:
        """Return the changes that do what `self` does and then what `later` does, as one set of changes.

        One set of changes removes first, then sets and appends in order (Envoy's order at one level). So what
        `later` removes or sets drops this one's sets and appends of that header (names are case-insensitive);
        its appends come after this one's.
        """
        overridden = {name.lower() for name in later.remove} | {name.lower() for name, _ in later.set}
        removed = {name.lower() for name in self.remove}
        return HeaderChanges(
            set=(*(pair for pair in self.set if pair[0].lower() not in overridden), *later.set),
            add=(*(pair for pair in self.add if pair[0].lower() not in overridden), *later.add),
            remove=(*self.remove, *(name for name in later.remove if name.lower() not in removed)),
        )


@attrs.frozen(kw_only=True)
class DirectResponse:
    """Answer the request here."""

    status: int
    body: str


@attrs.frozen(kw_only=True)
class Redirect:
    """Answer with a redirect to the request's URL with these parts changed (empty or 0 keeps the request's)."""

    status_code: int
    """301, 302, 303, 307 or 308."""
    scheme: str = ""
    hostname: str = ""
    port: int = 0
    """The port the Location names; 0 names none (a scheme's well-known port is never named)."""
    path: PathRewrite | None = None


@attrs.frozen(kw_only=True, cache_hash=True)
class Destination:
    """A cluster a forwarding route sends its share of the requests to."""

    cluster: str
    weight: int
    """Positive: a backend of weight 0 gets no destination."""
    selector: tuple[tuple[str, str], ...] = ()
    """The labels, sorted, that the cluster's endpoints must all have to take this share: the backendRef's Service
    selector (its cluster is its service account's, which other Services may share). Empty: every endpoint."""
    request_headers: HeaderChanges | None = None
    """The header changes of the requests this share takes (the rule's, then its backendRef's own), when it has its
    own; then the route has none and every destination carries its whole changes. Only with several destinations:
    one destination's changes are the route's."""
    response_headers: HeaderChanges | None = None


@attrs.frozen(kw_only=True)
class Mirror:
    """A cluster that receives a copy of the requests (its answers are dropped)."""

    cluster: str
    per_million: int | None = None
    """The share of requests copied, in millionths; None copies every one."""


@attrs.frozen(kw_only=True)
class Retry:
    """What a rule asks of retries (the API's HTTPRouteRetry); the projection adds what its data plane retries on."""

    codes: tuple[int, ...] = ()
    """The response codes that are retried, as the rule gives them."""
    attempts: int | None = None
    """How many retries; None leaves the number to the projection."""
    backoff_ms: int = 0
    """The base interval between retries; 0 leaves it to the projection."""


@attrs.frozen(kw_only=True, cache_hash=True)
class Forward:
    """Send the request on, split by weight over `destinations`."""

    destinations: tuple[Destination, ...]
    """At least one, in backendRef order."""
    timeout_ms: int | None = None
    """The whole request's timeout (0: none); None leaves the data plane's default."""
    per_try_timeout_ms: int = 0
    """Each attempt's timeout (the API's backendRequest timeout); 0: none."""
    retry: Retry | None = None
    host_rewrite: str = ""
    """The Host the destination sees; empty keeps the request's."""
    path_rewrite: PathRewrite | None = None
    mirrors: tuple[Mirror, ...] = ()

    @property
    def clusters(self) -> tuple[str, ...]:
        """Every cluster the route sends to or mirrors to, destinations first."""
        return (*(item.cluster for item in self.destinations), *(item.cluster for item in self.mirrors))


Action = Forward | Redirect | DirectResponse


@attrs.frozen(kw_only=True)
class HTTPRoute:
    """One route of a virtual host: a match and what it does, tried in the order the view gives."""

    name: str
    """`<kind>/<ns>/<name>/rule/<i>/match/<j>` (what an operator greps a dump for); routes split from one match
    (the share of unresolved backends) have the same name."""
    match: RouteMatch
    action: Action
    method: str = ""
    """The method every request the match takes has (an HTTP method match, `POST` for gRPC); empty when any."""
    request_headers: HeaderChanges | None = None
    response_headers: HeaderChanges | None = None

    @property
    def clusters(self) -> tuple[str, ...]:
        """The clusters the route sends to or mirrors to (none when it answers itself)."""
        return self.action.clusters if isinstance(self.action, Forward) else ()


@attrs.frozen(kw_only=True)
class VirtualHost:
    """The routes of one edge domain, in precedence order."""

    name: str
    """`<gateway ns>/<gateway name>/<listener>/<domain>`."""
    domains: tuple[str, ...]
    routes: tuple[HTTPRoute, ...] = ()


SelectorKeys = tuple[tuple[str, ...], ...]
"""The label key sets, each sorted, of the selectors that routes apply to one cluster, sorted and distinct."""


def selector_keys(routes: Iterable[HTTPRoute]) -> Mapping[str, SelectorKeys]:
    """Return, per cluster that `routes` send a selected share to, the key sets of those selectors (sorted)."""
    return forward_selector_keys(route.action for route in routes if isinstance(route.action, Forward))


def forward_selector_keys(forwards: Iterable[Forward]) -> Mapping[str, SelectorKeys]:
    """Return, per cluster that `forwards` send a selected share to, the key sets of those selectors (sorted)."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for forward in forwards:
        for item in forward.destinations:
            if item.selector:
                found.setdefault(item.cluster, set()).add(tuple(label for label, _ in item.selector))
    return {cluster: tuple(sorted(keys)) for cluster, keys in sorted(found.items())}


def slice_clusters(routes: Iterable[HTTPRoute]) -> tuple[str, ...]:
    """Return, sorted, the slice clusters (`slices:...`, Services without a selector) that `routes` send or mirror
    to: the projection builds them from EndpointSlices, not from the registry."""
    found: set[str] = set()
    for route in routes:
        if isinstance(route.action, Forward):
            found.update(route.action.clusters)
    return tuple(sorted(name for name in found if name.startswith(SLICE_CLUSTER_PREFIX)))
