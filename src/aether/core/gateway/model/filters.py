"""Route filters: header modifiers, redirects, URL rewrites and mirrors, parsed with the API's rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from aether.core.gateway.model.fields import (
    SpecInvalid,
    header_name,
    hostname,
    integer,
    items,
    obj,
    text,
    unique,
)
from aether.core.gateway.model.refs import BackendRef, backend_ref

REDIRECT_CODES = (301, 302, 303, 307, 308)
"""Every status code the API allows a RequestRedirect (301/302 core, 303/307/308 extended)."""

HTTP_FILTERS = (
    "RequestHeaderModifier",
    "ResponseHeaderModifier",
    "RequestMirror",
    "RequestRedirect",
    "URLRewrite",
    "ExtensionRef",
    "CORS",
    "ExternalAuth",
)
GRPC_FILTERS = ("RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror", "ExtensionRef")
SUPPORTED_FILTERS = frozenset(HTTP_FILTERS[:5])
"""What this implementation translates; the others make their rule answer 500 (the API's rule for filters an
implementation cannot apply: never skip them)."""

_FIELD = {
    "RequestHeaderModifier": "requestHeaderModifier",
    "ResponseHeaderModifier": "responseHeaderModifier",
    "RequestMirror": "requestMirror",
    "RequestRedirect": "requestRedirect",
    "URLRewrite": "urlRewrite",
    "ExtensionRef": "extensionRef",
    "CORS": "cors",
    "ExternalAuth": "externalAuth",
}


@attrs.frozen(kw_only=True)
class HeaderModifier:
    """Headers to overwrite (`set`), append (`add`) and remove, in the order given."""

    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class PathModifier:
    """`ReplaceFullPath` or `ReplacePrefixMatch`, and the replacement."""

    type: str
    value: str


@attrs.frozen(kw_only=True)
class Redirect:
    """A RequestRedirect: every field empty or 0 keeps what the request had."""

    scheme: str = ""
    hostname: str = ""
    port: int = 0
    status_code: int = 302
    path: PathModifier | None = None


@attrs.frozen(kw_only=True)
class Rewrite:
    """A URLRewrite: the Host header and the path the backend sees."""

    hostname: str = ""
    path: PathModifier | None = None


@attrs.frozen(kw_only=True)
class Mirror:
    """A RequestMirror: a copy of `numerator/denominator` of the requests goes to `backend`."""

    backend: BackendRef
    numerator: int = 100
    denominator: int = 100


@attrs.frozen(kw_only=True)
class Filters:
    """The filters of one rule, at most one of each kind but mirrors."""

    request_headers: HeaderModifier | None = None
    response_headers: HeaderModifier | None = None
    redirect: Redirect | None = None
    rewrite: Rewrite | None = None
    mirrors: tuple[Mirror, ...] = ()
    unsupported: tuple[str, ...] = ()
    """The filter types given that this implementation cannot apply (`ExtensionRef`, `CORS`, `ExternalAuth`)."""


NO_FILTERS = Filters()

PER_BACKEND_FILTERS = frozenset({"RequestHeaderModifier", "ResponseHeaderModifier"})
"""What a backendRef's own filters may do here: Envoy changes headers per weighted cluster, but rewrites, redirects
and mirrors are the route's, not a cluster's, so a backendRef cannot have its own."""


def per_backend_refused(backend_filters: Filters) -> tuple[str, ...]:
    """Return the filter types of a backendRef's `filters` that cannot be applied to that backend alone (in the
    order RequestRedirect, URLRewrite, RequestMirror, then the unsupported ones as given)."""
    if backend_filters is NO_FILTERS:
        return ()
    refused = [
        kind
        for kind, present in (
            ("RequestRedirect", backend_filters.redirect is not None),
            ("URLRewrite", backend_filters.rewrite is not None),
            ("RequestMirror", bool(backend_filters.mirrors)),
        )
        if present
    ]
    return (*refused, *backend_filters.unsupported)


def _pairs(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for index, raw in enumerate(items(value, path, max_items=16)):
        where = f"{path}[{index}]"
        fields = obj(raw, where)
        pairs.append(
            (
                header_name(fields.get("name"), f"{where}.name"),
                text(fields.get("value"), f"{where}.value", max_length=4096, min_length=1),
            )
        )
    unique([name.lower() for name, _ in pairs], path, what="header names")
    return tuple(pairs)


def _header_modifier(value: Any, path: str) -> HeaderModifier:
    fields = obj(value, path)
    remove = tuple(
        header_name(raw, f"{path}.remove[{index}]")
        for index, raw in enumerate(items(fields.get("remove"), f"{path}.remove", max_items=16))
    )
    unique([name.lower() for name in remove], f"{path}.remove", what="header names")
    return HeaderModifier(
        set=_pairs(fields.get("set"), f"{path}.set"),
        add=_pairs(fields.get("add"), f"{path}.add"),
        remove=remove,
    )


def _path_modifier(value: Any, path: str) -> PathModifier | None:
    if value is None:
        return None
    fields = obj(value, path)
    kind = text(fields.get("type"), f"{path}.type", choices=("ReplaceFullPath", "ReplacePrefixMatch"))
    full, prefix = fields.get("replaceFullPath"), fields.get("replacePrefixMatch")
    wanted, other = ("replaceFullPath", prefix) if kind == "ReplaceFullPath" else ("replacePrefixMatch", full)
    given = full if kind == "ReplaceFullPath" else prefix
    if given is None:
        raise SpecInvalid(path, f"{wanted} must be specified when type is set to {kind!r}")
    if other is not None:
        raise SpecInvalid(path, f"only {wanted} may be specified when type is set to {kind!r}")
    replacement = text(given, f"{path}.{wanted}", max_length=1024)
    if not replacement.startswith("/"):
        raise SpecInvalid(f"{path}.{wanted}", "must be an absolute path starting with '/'", value=replacement)
    return PathModifier(type=kind, value=replacement)


def _redirect(value: Any, path: str) -> Redirect:
    fields = obj(value, path)
    host = fields.get("hostname")
    if host is not None and "*" in str(host):
        raise SpecInvalid(f"{path}.hostname", "must be a precise hostname (no wildcard)", value=host)
    code = integer(fields.get("statusCode"), f"{path}.statusCode", low=100, high=599, default=302)
    if code not in REDIRECT_CODES:
        raise SpecInvalid(f"{path}.statusCode", f"must be one of {list(REDIRECT_CODES)}", value=code)
    return Redirect(
        scheme=text(fields.get("scheme"), f"{path}.scheme", default="", choices=("http", "https"))
        if fields.get("scheme") is not None
        else "",
        hostname=hostname(host, f"{path}.hostname") if host is not None else "",
        port=integer(fields.get("port"), f"{path}.port", low=1, high=65535, default=0),
        status_code=code,
        path=_path_modifier(fields.get("path"), f"{path}.path"),
    )


def _rewrite(value: Any, path: str) -> Rewrite:
    fields = obj(value, path)
    host = fields.get("hostname")
    if host is not None and "*" in str(host):
        raise SpecInvalid(f"{path}.hostname", "must be a precise hostname (no wildcard)", value=host)
    return Rewrite(
        hostname=hostname(host, f"{path}.hostname") if host is not None else "",
        path=_path_modifier(fields.get("path"), f"{path}.path"),
    )


def _mirror(value: Any, path: str, *, namespace: str) -> Mirror:
    fields = obj(value, path)
    backend = backend_ref(fields.get("backendRef"), f"{path}.backendRef", namespace=namespace, weighted=False)
    percent, fraction = fields.get("percent"), fields.get("fraction")
    if percent is not None and fraction is not None:
        raise SpecInvalid(path, "only one of percent or fraction may be specified")
    if percent is not None:
        return Mirror(
            backend=backend, numerator=integer(percent, f"{path}.percent", low=0, high=100), denominator=100
        )
    if fraction is not None:
        parts = obj(fraction, f"{path}.fraction")
        numerator = integer(parts.get("numerator"), f"{path}.fraction.numerator", low=0, high=2**31 - 1)
        denominator = integer(
            parts.get("denominator"), f"{path}.fraction.denominator", low=1, high=2**31 - 1, default=100
        )
        if numerator > denominator:
            raise SpecInvalid(f"{path}.fraction", "numerator must be less than or equal to denominator")
        return Mirror(backend=backend, numerator=numerator, denominator=denominator)
    return Mirror(backend=backend)


def filters(value: Any, path: str, *, namespace: str, allowed: Sequence[str]) -> Filters:
    """Return a rule's filters; `allowed` are the filter types of the route kind (HTTP or gRPC).

    The API's rules: each filter's type names exactly the one field it sets; every type but RequestMirror at most
    once; RequestRedirect and URLRewrite never together.
    """
    if value is None:
        return NO_FILTERS
    found: dict[str, Any] = {}
    mirrors: list[Mirror] = []
    unsupported: list[str] = []
    raw_filters = items(value, path, max_items=16)
    for index, raw in enumerate(raw_filters):
        where = f"{path}[{index}]"
        fields = obj(raw, where)
        kind = text(fields.get("type"), f"{where}.type", choices=allowed)
        for other, field in _FIELD.items():
            if other != kind and fields.get(field) is not None:
                raise SpecInvalid(where, f"filter.{field} must be nil if the filter.type is not {other}")
        if kind not in ("ExtensionRef", "CORS", "ExternalAuth") and fields.get(_FIELD[kind]) is None:
            raise SpecInvalid(where, f"filter.{_FIELD[kind]} must be specified for {kind} filter.type")
        if kind == "RequestMirror":
            mirrors.append(
                _mirror(fields.get("requestMirror"), f"{where}.requestMirror", namespace=namespace)
            )
            continue
        if kind in found or kind in unsupported:
            raise SpecInvalid(path, f"{kind} filter cannot be repeated")
        if kind not in SUPPORTED_FILTERS:
            unsupported.append(kind)
            continue
        body = fields[_FIELD[kind]]
        where = f"{where}.{_FIELD[kind]}"
        if kind == "RequestRedirect":
            found[kind] = _redirect(body, where)
        elif kind == "URLRewrite":
            found[kind] = _rewrite(body, where)
        else:
            found[kind] = _header_modifier(body, where)
    if "RequestRedirect" in found and "URLRewrite" in found:
        raise SpecInvalid(
            path,
            "may specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both",
        )
    if not raw_filters:
        return NO_FILTERS
    return Filters(
        request_headers=found.get("RequestHeaderModifier"),
        response_headers=found.get("ResponseHeaderModifier"),
        redirect=found.get("RequestRedirect"),
        rewrite=found.get("URLRewrite"),
        mirrors=tuple(mirrors),
        unsupported=tuple(unsupported),
    )
