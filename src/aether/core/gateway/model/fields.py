"""Reading a Gateway API spec from its JSON: typed field accessors that enforce the API's schema as they read.

Each accessor takes the value and its path in the object (`spec.rules[0].matches[1].path`), and raises
`SpecInvalid` naming the path, the rule and the value when the schema forbids it, with the reason the API gives
(`UnsupportedValue` unless said otherwise). The API server would have refused such an object; when one reaches us
anyway (an older server, a manifest rendered offline), the object is rejected whole and every other one still works.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

FlatObject = tuple[tuple[str, str | int], ...]
"""A JSON object whose values are all strings or integers, as its items (hashable)."""
FlatArray = tuple[str | FlatObject, ...]
"""A JSON array of strings or flat objects, as a hashable key (`flat_key`)."""

P = ParamSpec("P")
R = TypeVar("R")

UNSUPPORTED_VALUE = "UnsupportedValue"

_HOSTNAME = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""The API's `Hostname` pattern: RFC 1123, lower case, with an optional leading `*.` label."""
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")
"""The API's `HeaderName` pattern (RFC 7230 token characters; no pseudo-headers)."""
_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
"""GEP-2257 durations: up to four `<number><unit>` parts."""
_DURATION_PART = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_IPV4 = re.compile(r"^[0-9]+(\.[0-9]+){3}$")


class SpecInvalid(ValueError):
    """A field breaks the API's schema or CEL rules; `reason` is the status reason the API would give."""

    def __init__(self, path: str, rule: str, *, value: Any = None, reason: str = UNSUPPORTED_VALUE) -> None:
        super().__init__(path, rule, value)
        self.path = path
        self.rule = rule
        self.value = value
        self.reason = reason

    def __str__(self) -> str:
        shown = "" if self.value is None else f" (got {self.value!r})"
        return f"{self.path}: {self.rule}{shown}"


def obj(value: Any, path: str) -> Mapping[str, Any]:
    """Return `value` as a JSON object; an absent value (None) reads as an empty one."""
    if type(value) is dict:  # what JSON gives: no ABC check
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecInvalid(path, "must be an object", value=value)
    return value


def items(value: Any, path: str, *, max_items: int, min_items: int = 0) -> Sequence[Any]:
    """Return `value` as a JSON array of `min_items` to `max_items` entries (absent: empty)."""
    if value is None:
        value = []
    if not isinstance(value, list):
        raise SpecInvalid(path, "must be an array", value=value)
    if len(value) > max_items:
        raise SpecInvalid(path, f"must have at most {max_items} items", value=len(value))
    if len(value) < min_items:
        raise SpecInvalid(path, f"must have at least {min_items} item(s)", value=len(value))
    return value


def text(
    value: Any,
    path: str,
    *,
    default: str | None = None,
    choices: Sequence[str] = (),
    max_length: int = 253,
    min_length: int = 0,
) -> str:
    """Return `value` as a string of bounded length, one of `choices` when given; None takes `default`."""
    if value is None:
        if default is None:
            raise SpecInvalid(path, "is required")
        return default
    if not isinstance(value, str):
        raise SpecInvalid(path, "must be a string", value=value)
    if choices and value not in choices:
        raise SpecInvalid(path, f"must be one of {sorted(choices)!r}", value=value)
    if len(value) > max_length:
        raise SpecInvalid(path, f"must be at most {max_length} characters", value=value)
    if len(value) < min_length:
        raise SpecInvalid(path, f"must be at least {min_length} character(s)", value=value)
    return value


def integer(value: Any, path: str, *, low: int, high: int, default: int | None = None) -> int:
    """Return `value` as an integer in `[low, high]`; None takes `default`."""
    if value is None:
        if default is None:
            raise SpecInvalid(path, "is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecInvalid(path, "must be an integer", value=value)
    if not low <= value <= high:
        raise SpecInvalid(path, f"must be between {low} and {high}", value=value)
    return value


def field_text(
    fields: Mapping[str, Any],
    name: str,
    where: str,
    *,
    default: str | None = None,
    choices: Sequence[str] = (),
    max_length: int = 253,
    min_length: int = 0,
) -> str:
    """`text(fields.get(name), f"{where}.{name}", ...)`, the path spelled only when the value is refused (parsing
    reads tens of fields per route; almost all are absent or valid)."""
    value = fields.get(name)
    if value is None:
        if default is not None:
            return default
    elif type(value) is str and min_length <= len(value) <= max_length and (not choices or value in choices):
        return value
    return text(
        value,
        f"{where}.{name}",
        default=default,
        choices=choices,
        max_length=max_length,
        min_length=min_length,
    )


def field_integer(
    fields: Mapping[str, Any], name: str, where: str, *, low: int, high: int, default: int | None = None
) -> int:
    """`integer(fields.get(name), f"{where}.{name}", ...)`, the path spelled only when the value is refused."""
    value = fields.get(name)
    if value is None:
        if default is not None:
            return default
    elif type(value) is int and low <= value <= high:
        return value
    return integer(value, f"{where}.{name}", low=low, high=high, default=default)


def flat_key(value: Any) -> FlatArray | None:
    """Return a JSON array of strings or of flat objects (every value a string or an integer) as a hashable key, in
    order; None for anything else (absent, not an array, a nested or another scalar value).

    What parses a key equal to another gives the same result: `True` and `1.0` are not integers here, so they never
    share a key with `1` (they compare equal, but the schema refuses them). So a parse of the array may be memoized
    on the key (`thawed` gives the array back): see `MemoizedByValue`.
    """
    if type(value) is not list:
        return None
    key: list[str | FlatObject] = []
    for item in value:
        kind = type(item)
        if kind is str:
            key.append(item)
            continue
        if kind is not dict:
            return None
        for field in item.values():
            kind = type(field)
            if kind is not str and kind is not int:
                return None
        key.append(tuple(item.items()))
    return tuple(key)


def thawed(key: FlatArray) -> list[Any]:
    """Return the JSON array `flat_key` made `key` of (an equal one)."""
    return [item if isinstance(item, str) else dict(item) for item in key]


class MemoizedByValue(Generic[P, R]):
    """A parse of a JSON array (`parse(value, path, ...)`), memoized on the array's value when it is flat
    (`flat_key`): references, hostnames and header matches repeat across the routes, and each distinct one is
    parsed once per path and options.

    The same parse runs on a miss, on the array thawed from its key, so its result is what parsing the value gives;
    a refusal is raised by it and never cached, so every error message is the one the parse always gave. A value
    that is not flat is parsed each time. The memo is process-wide and bounded (4,096 entries); `cache_clear`
    empties it.
    """

    def __init__(self, parse: Callable[Concatenate[Any, str, P], R]) -> None:
        functools.update_wrapper(self, parse)
        self._parse = parse
        self._memo = functools.lru_cache(maxsize=4096)(self._thawed)

    def __call__(self, value: Any, path: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
        key = flat_key(value)
        if key is None:
            return self._parse(value, path, *args, **kwargs)
        return self._memo(key, path, *args, **kwargs)  # type: ignore[arg-type]  # JSON options: str, int, bool

    def cache_clear(self) -> None:
        """Forget every parse (a benchmark's from-scratch figure starts cold)."""
        self._memo.cache_clear()

    def _thawed(self, key: FlatArray, path: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._parse(thawed(key), path, *args, **kwargs)


def hostname(value: Any, path: str) -> str:
    """Return a Gateway API `Hostname`: RFC 1123, no IP, a wildcard only as the whole leading label."""
    name = text(value, path, min_length=1)
    if not _HOSTNAME.match(name):
        rule = (
            "a wildcard must be the whole first label ('*.example.com')"
            if "*" in name
            else "must be a lower-case RFC 1123 hostname"
        )
        raise SpecInvalid(path, rule, value=name)
    if _IPV4.match(name):
        raise SpecInvalid(path, "must be a hostname, not an IP address", value=name)
    return name


@MemoizedByValue
def hostnames(value: Any, path: str, *, max_items: int = 16) -> tuple[str, ...]:
    """Return a list of hostnames (the routes' `hostnames`)."""
    return tuple(
        hostname(item, f"{path}[{index}]")
        for index, item in enumerate(items(value, path, max_items=max_items))
    )


def header_name(value: Any, path: str) -> str:
    """Return an HTTP header name (case kept; compare it case-insensitively)."""
    name = text(value, path, min_length=1, max_length=256)
    if not _HEADER_NAME.match(name):
        raise SpecInvalid(path, "must be an HTTP header name (token characters, no ':')", value=name)
    return name


def duration_ms(value: Any, path: str) -> int | None:
    """Return a GEP-2257 duration (`1h30m`, `500ms`) in milliseconds; None when absent."""
    if value is None:
        return None
    spelled = text(value, path)
    if not _DURATION.match(spelled):
        raise SpecInvalid(path, "must be a Gateway API duration like '10s' or '1m30s'", value=spelled)
    return sum(int(number) * _UNIT_MS[unit] for number, unit in _DURATION_PART.findall(spelled))


def unique(values: Sequence[str], path: str, *, what: str) -> None:
    """Raise when `values` repeats an entry (the API's `listType=map` and uniqueness CEL rules)."""
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise SpecInvalid(path, f"{what} must be unique", value=value)
        seen.add(value)
