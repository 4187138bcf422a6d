"""Request matches of HTTPRoute and GRPCRoute rules, parsed with the API's rules (regexes checked for RE2)."""

from __future__ import annotations

import re
from typing import Any

import attrs

from aether.core.gateway.model.fields import (
    MemoizedByValue,
    SpecInvalid,
    field_text,
    header_name,
    items,
    obj,
    text,
)
from aether.core.gateway.model.regex import regex_problem

EXACT = "Exact"
PATH_PREFIX = "PathPrefix"
REGULAR_EXPRESSION = "RegularExpression"
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")

_PATH_CHARACTERS = re.compile(r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$")
_PATH_FORBIDDEN = ("//", "/./", "/../", "%2f", "%2F", "#")
_GRPC_SERVICE = re.compile(r"(?i)^\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$")
_GRPC_METHOD = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


class RegexInvalid(ValueError):
    """A regular expression Envoy would refuse: its rule is dropped, the rest of the route stays (see `rules`)."""

    def __init__(self, path: str, pattern: str, problem: str) -> None:
        super().__init__(path, pattern, problem)
        self.path, self.pattern, self.problem = path, pattern, problem

    def __str__(self) -> str:
        return f"{self.path}: {self.problem} (got {self.pattern!r})"


@attrs.frozen(kw_only=True, cache_hash=True)
class PathMatch:
    """`Exact`, `PathPrefix` or `RegularExpression`, and the value."""

    type: str = PATH_PREFIX
    value: str = "/"


@attrs.frozen(kw_only=True, cache_hash=True)
class ValueMatch:
    """A header or query parameter match: `Exact` or `RegularExpression`."""

    type: str
    name: str
    value: str


@attrs.frozen(kw_only=True, cache_hash=True)
class HTTPMatch:
    """One HTTPRoute match: every condition must hold."""

    path: PathMatch = PathMatch()
    method: str = ""
    headers: tuple[ValueMatch, ...] = ()
    query_params: tuple[ValueMatch, ...] = ()


@attrs.frozen(kw_only=True, cache_hash=True)
class GRPCMatch:
    """One GRPCRoute match: a service and/or method (`Exact` or `RegularExpression`) and headers."""

    type: str = EXACT
    service: str = ""
    method: str = ""
    headers: tuple[ValueMatch, ...] = ()


DEFAULT_HTTP_MATCH = HTTPMatch()
"""The API's default when a rule gives no match: every request (PathPrefix `/`)."""
DEFAULT_GRPC_MATCH = GRPCMatch()
"""A GRPCRoute rule without matches matches every gRPC request."""


def _checked(pattern: str, path: str) -> str:
    problem = regex_problem(pattern)
    if problem:
        raise RegexInvalid(path, pattern, problem)
    return pattern


def _path(value: Any, path: str) -> PathMatch:
    fields = obj(value, path)
    kind = field_text(
        fields, "type", path, default=PATH_PREFIX, choices=(EXACT, PATH_PREFIX, REGULAR_EXPRESSION)
    )
    spelled = field_text(fields, "value", path, default="/", max_length=1024)
    if kind == REGULAR_EXPRESSION:
        return PathMatch(type=kind, value=_checked(spelled, f"{path}.value"))
    if not spelled.startswith("/"):
        raise SpecInvalid(
            f"{path}.value",
            "value must be an absolute path and start with '/' when type one of ['Exact', 'PathPrefix']",
            value=spelled,
        )
    for forbidden in _PATH_FORBIDDEN:
        if forbidden in spelled:
            raise SpecInvalid(f"{path}.value", f"must not contain {forbidden!r}", value=spelled)
    for ending in ("/..", "/."):
        if spelled.endswith(ending):
            raise SpecInvalid(f"{path}.value", f"must not end with {ending!r}", value=spelled)
    if not _PATH_CHARACTERS.match(spelled):
        raise SpecInvalid(f"{path}.value", "must only contain valid path characters", value=spelled)
    return PathMatch(type=kind, value=spelled)


@MemoizedByValue
def _value_matches(value: Any, path: str, *, what: str, fold_case: bool) -> tuple[ValueMatch, ...]:
    if value is None:
        return ()
    matches: list[ValueMatch] = []
    seen: set[str] = set()
    spelled_names: set[str] = set()
    for index, raw in enumerate(items(value, path, max_items=16)):
        where = f"{path}[{index}]"
        fields = obj(raw, where)
        kind = field_text(fields, "type", where, default=EXACT, choices=(EXACT, REGULAR_EXPRESSION))
        name = header_name(fields.get("name"), f"{where}.name")
        spelled = field_text(fields, "value", where, max_length=4096, min_length=1)
        if kind == REGULAR_EXPRESSION:
            _checked(spelled, f"{where}.value")
        # The schema refuses a name given twice (the list is a map keyed by name).
        if name in spelled_names:
            raise SpecInvalid(path, f"{what} names must be unique", value=name)
        spelled_names.add(name)
        identity = name.lower() if fold_case else name
        if identity in seen:
            # Header names compare case-insensitively: of equivalent names only the first counts (the API's rule).
            continue
        seen.add(identity)
        matches.append(ValueMatch(type=kind, name=name.lower() if fold_case else name, value=spelled))
    return tuple(matches)


def http_match(value: Any, path: str) -> HTTPMatch:
    """Return one HTTPRoute match."""
    fields = obj(value, path)
    method, headers, query = fields.get("method"), fields.get("headers"), fields.get("queryParams")
    tested = fields.get("path")
    return HTTPMatch(
        path=_path(tested, f"{path}.path") if tested is not None else PathMatch(),
        method=text(method, f"{path}.method", choices=METHODS) if method is not None else "",
        headers=()
        if headers is None
        else _value_matches(headers, f"{path}.headers", what="header", fold_case=True),
        query_params=()
        if query is None
        else _value_matches(query, f"{path}.queryParams", what="query parameter", fold_case=False),
    )


def grpc_match(value: Any, path: str) -> GRPCMatch:
    """Return one GRPCRoute match (the API: one of service or method must be given when `method` is)."""
    fields = obj(value, path)
    headers = _value_matches(fields.get("headers"), f"{path}.headers", what="header", fold_case=True)
    if fields.get("method") is None:
        return GRPCMatch(headers=headers)
    method = obj(fields.get("method"), f"{path}.method")
    kind = text(method.get("type"), f"{path}.method.type", default=EXACT, choices=(EXACT, REGULAR_EXPRESSION))
    service = text(method.get("service"), f"{path}.method.service", default="", max_length=1024)
    name = text(method.get("method"), f"{path}.method.method", default="", max_length=1024)
    if not service and not name:
        raise SpecInvalid(f"{path}.method", "one or both of 'service' or 'method' must be specified")
    if kind == EXACT:
        if service and not _GRPC_SERVICE.match(service):
            raise SpecInvalid(
                f"{path}.method.service",
                "must only contain valid characters (a gRPC service name)",
                value=service,
            )
        if name and not _GRPC_METHOD.match(name):
            raise SpecInvalid(
                f"{path}.method.method", "must only contain valid characters (a gRPC method name)", value=name
            )
    else:
        if service:
            _checked(service, f"{path}.method.service")
        if name:
            _checked(name, f"{path}.method.method")
    return GRPCMatch(type=kind, service=service, method=name, headers=headers)
