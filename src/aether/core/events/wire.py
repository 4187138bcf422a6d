"""The mapping between attrs value classes and their protobuf messages, derived once from the type hints.

A class and its message share field names. Each field's Python type decides how it crosses:
scalars as they are, enums as their value, string maps as sorted `StringPair` lists, `Redacted` as bytes,
tuples as repeated fields (order kept), and nested attrs classes as sub-messages (recursively).
Deriving the mapping from the types keeps one piece of code for every value, event and checkpoint.
"""

from __future__ import annotations

import enum
import functools
import typing
from collections.abc import Callable
from typing import Any

import attrs
import immutables
from google.protobuf.message import Message

from aether.core.errors import InternalError
from aether.core.values import Redacted

_Encode = Callable[[Any, Any], None]
"""`encode(value, message)`: write one attribute of `value` into `message`."""
_Decode = Callable[[Any], tuple[str, Any]]
"""`decode(message) -> (name, value)`: read one attribute from `message`."""


@attrs.frozen(kw_only=True)
class WirePlan:
    """How one attrs class crosses to and from its protobuf message."""

    cls: type[Any]
    encoders: tuple[_Encode, ...]
    decoders: tuple[_Decode, ...]

    def encode_into(self, value: Any, message: Message) -> None:
        """Write every field of `value` into `message` (which is marked present even if all fields are defaults)."""
        message.SetInParent()
        for encode in self.encoders:
            encode(value, message)

    def decode(self, message: Message, **extra: Any) -> Any:
        """Build an instance of the class from `message`; `extra` supplies fields the message does not carry."""
        fields = dict(decode(message) for decode in self.decoders)
        fields.update(extra)
        return self.cls(**fields)


@functools.cache
def plan_for(cls: type[Any], *, skip: frozenset[str] = frozenset()) -> WirePlan:
    """Return the (cached) wire plan of attrs class `cls`, leaving out the fields named in `skip`."""
    hints = typing.get_type_hints(cls)
    encoders: list[_Encode] = []
    decoders: list[_Decode] = []
    for field in attrs.fields(cls):
        if field.name in skip:
            continue
        encode, decode = _field_codec(field.name, hints[field.name])
        encoders.append(encode)
        decoders.append(decode)
    return WirePlan(cls=cls, encoders=tuple(encoders), decoders=tuple(decoders))


def _field_codec(name: str, hint: Any) -> tuple[_Encode, _Decode]:
    origin = typing.get_origin(hint)
    if hint in (str, int, bool, bytes):
        return _scalar(name)
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum | enum.StrEnum):
        return _enum(name, hint)
    if hint is Redacted:
        return _redacted(name)
    if origin is immutables.Map:
        return _string_map(name)
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if item in (str, int):
            return _scalar_list(name)
        if attrs.has(item):
            return _message_list(name, item)
    if isinstance(hint, type) and attrs.has(hint):
        return _message(name, hint)
    raise InternalError(detail=f"field {name!r} has a type the wire mapping does not know: {hint!r}")


def _scalar(name: str) -> tuple[_Encode, _Decode]:
    def encode(value: Any, message: Any) -> None:
        setattr(message, name, getattr(value, name))

    def decode(message: Any) -> tuple[str, Any]:
        return name, getattr(message, name)

    return encode, decode


def _enum(name: str, kind: type[enum.IntEnum] | type[enum.StrEnum]) -> tuple[_Encode, _Decode]:
    def encode(value: Any, message: Any) -> None:
        setattr(message, name, getattr(value, name).value)

    def decode(message: Any) -> tuple[str, Any]:
        return name, kind(getattr(message, name))

    return encode, decode


def _redacted(name: str) -> tuple[_Encode, _Decode]:
    def encode(value: Any, message: Any) -> None:
        setattr(message, name, getattr(value, name).secret)

    def decode(message: Any) -> tuple[str, Any]:
        return name, Redacted(getattr(message, name))

    return encode, decode


def _string_map(name: str) -> tuple[_Encode, _Decode]:
    def encode(value: Any, message: Any) -> None:
        pairs = getattr(message, name)
        for key, item in sorted(getattr(value, name).items()):
            pairs.add(key=key, value=item)

    def decode(message: Any) -> tuple[str, Any]:
        return name, immutables.Map((pair.key, pair.value) for pair in getattr(message, name))

    return encode, decode


def _scalar_list(name: str) -> tuple[_Encode, _Decode]:
    def encode(value: Any, message: Any) -> None:
        getattr(message, name).extend(getattr(value, name))

    def decode(message: Any) -> tuple[str, Any]:
        return name, tuple(getattr(message, name))

    return encode, decode


def _message(name: str, cls: type[Any]) -> tuple[_Encode, _Decode]:
    def encode(value: Any, message: Any) -> None:
        plan_for(cls).encode_into(getattr(value, name), getattr(message, name))

    def decode(message: Any) -> tuple[str, Any]:
        return name, plan_for(cls).decode(getattr(message, name))

    return encode, decode


def _message_list(name: str, cls: type[Any]) -> tuple[_Encode, _Decode]:
    def encode(value: Any, message: Any) -> None:
        plan = plan_for(cls)
        items = getattr(message, name)
        for item in getattr(value, name):
            plan.encode_into(item, items.add())

    def decode(message: Any) -> tuple[str, Any]:
        plan = plan_for(cls)
        return name, tuple(plan.decode(item) for item in getattr(message, name))

    return encode, decode
