"""The mapping between attrs value classes and their protobuf messages, derived once from the type hints.

A class and its message share field names. Each field's Python type decides how it crosses:
scalars as they are, enums as their value, string maps as sorted `StringPair` lists, `Redacted` as bytes,
tuples as repeated fields (order kept), and nested attrs classes as sub-messages (recursively).
Deriving the mapping from the types keeps one piece of code for every value, event and checkpoint.

Like attrs builds `__init__`, the plan compiles one encode and one decode function per class: replaying a
million-record log spends most of its time here, and straight-line code is several times faster than a loop of
per-field closures.
"""

from __future__ import annotations

import enum
import itertools
import typing
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import immutables
from google.protobuf.message import Message

from aether.core.errors import InternalError
from aether.core.values import Redacted, freeze_ints, freeze_str_map, freeze_strs


@attrs.frozen(kw_only=True)
class WirePlan:
    """How one attrs class crosses to and from its protobuf message."""

    cls: type[Any]
    encode_into: Callable[[Any, Message], None]
    """`encode_into(value, message)`: write every field of `value` into `message`, marking it present."""
    decode: Callable[..., Any]
    """`decode(message, **extra)`: build an instance from `message`; `extra` supplies fields it does not carry."""
    decode_nested: Callable[[Message], Any]
    """`decode_nested(message)`: the same without extra fields (what enclosing plans call)."""


def _pairs(mapping: immutables.Map[str, str], target: Any) -> None:
    for key, item in sorted(mapping.items()):
        target.add(key=key, value=item)


_EMPTY_MAP: immutables.Map[str, str] = immutables.Map()


def _from_pairs(pairs: Any) -> immutables.Map[str, str]:
    # Most maps on the wire are empty (endpoint metadata): sharing one empty map saves ~5 us per value.
    if not pairs:
        return _EMPTY_MAP
    return immutables.Map({pair.key: pair.value for pair in pairs})


def _encode_all(encode_into: Callable[[Any, Message], None], values: Any, target: Any) -> None:
    for value in values:
        encode_into(value, target.add())


_PLANS: dict[tuple[type[Any], frozenset[str]], WirePlan] = {}


def plan_for(cls: type[Any], *, skip: frozenset[str] = frozenset()) -> WirePlan:
    """Return the (cached) wire plan of attrs class `cls`, leaving out the fields named in `skip`."""
    plan = _PLANS.get((cls, skip))
    if plan is None:
        plan = _PLANS[(cls, skip)] = _compile(cls, skip)
    return plan


def _compile(cls: type[Any], skip: frozenset[str]) -> WirePlan:
    hints = typing.get_type_hints(cls)
    namespace: dict[str, Any] = {
        "_cls": cls,
        "_pairs": _pairs,
        "_from_pairs": _from_pairs,
        "_Redacted": Redacted,
        "_encode_all": _encode_all,
    }
    encode_lines = ["def encode_into(value, message):", "    message.SetInParent()"]
    decode_args: list[str] = []
    slot_lines: list[str] = []
    slots = None if skip else _slot_setters(cls)
    for index, field in enumerate(attrs.fields(cls)):
        if field.name in skip:
            continue
        encode, decode = _field_code(field.name, hints[field.name], f"_t{index}", namespace)
        encode_lines.append(f"    {encode}")
        decode_args.append(f"{field.name}={decode}")
        if slots is not None:
            namespace[f"_set{index}"] = slots[field.name]
            if field.converter is not None and field.converter not in _NO_OP_ON_DECODED:
                namespace[f"_convert{index}"] = field.converter
                decode = f"_convert{index}({decode})"
            slot_lines.append(f"    _set{index}(value, {decode})")
    # Nested values never take extra fields: a variant without `**extra` is cheaper, and for a class whose
    # `__init__` only converts and stores (see `_slot_setters`) it stores each field in its slot itself, as
    # `__init__` does, without the call's keyword matching (~2 us of a 17-field endpoint).
    nested_lines = (
        ["def decode_nested(message):", "    value = _new(_cls)", *slot_lines, "    return value"]
        if slots is not None
        else ["def decode_nested(message):", f"    return _cls({', '.join(decode_args)})"]
    )
    namespace["_new"] = object.__new__
    source = "\n".join(
        [
            *encode_lines,
            "def decode(message, **extra):",
            f"    return _cls({', '.join([*decode_args, '**extra'])})",
            *nested_lines,
        ]
    )
    exec(compile(source, f"<wire plan of {cls.__qualname__}>", "exec"), namespace)
    return WirePlan(
        cls=cls,
        encode_into=namespace["encode_into"],
        decode=namespace["decode"],
        decode_nested=namespace["decode_nested"],
    )


_NO_OP_ON_DECODED = frozenset((freeze_ints, freeze_strs, freeze_str_map))
"""Converters that return what the decode expressions build (a tuple, an `immutables.Map`) as it is: left out."""


def _slot_setters(cls: type[Any]) -> dict[str, Callable[[Any, Any], None]] | None:
    """Return the slot setter of each field of `cls` when its attrs `__init__` does nothing but store each field
    (converted by a plain converter) in its slot, else None: a class with validators, init hooks, a cached hash,
    `Converter` objects or any slot that is not a field keeps its `__init__`."""
    if (
        "__slots__" not in cls.__dict__
        or hasattr(cls, "__attrs_pre_init__")
        or hasattr(cls, "__attrs_post_init__")
    ):
        return None
    fields = attrs.fields(cls)
    if any(
        field.validator is not None or not field.init or isinstance(field.converter, attrs.Converter)
        for field in fields
    ):
        return None
    names = {field.name for field in fields}
    slots: dict[str, Callable[[Any, Any], None]] = {}
    for base in cls.__mro__:
        for name in base.__dict__.get("__slots__", ()):
            if name not in names and name != "__weakref__":
                return None
            slots.setdefault(name, base.__dict__[name].__set__)
    return slots if names <= slots.keys() else None


def _field_code(name: str, hint: Any, slot: str, namespace: dict[str, Any]) -> tuple[str, str]:
    """Return the encode statement and the decode expression of one field."""
    value, wire = f"value.{name}", f"message.{name}"
    origin = typing.get_origin(hint)
    if hint in (str, int, bool, bytes):
        return f"{wire} = {value}", wire
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum | enum.StrEnum):
        # A dict lookup is ~7x cheaper than calling the enum; an unknown value raises KeyError (see codec).
        namespace[slot] = {member.value: member for member in hint}
        return f"{wire} = {value}.value", f"{slot}[{wire}]"
    if hint is Redacted:
        return f"{wire} = {value}.secret", f"_Redacted({wire})"
    if origin is immutables.Map:
        return f"_pairs({value}, {wire})", f"_from_pairs({wire})"
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if item in (str, int):
            # Most lists on the wire are empty; `tuple()` of an empty repeated field still costs ~0.3 us.
            return f"{wire}.extend({value})", f"(tuple({wire}) if {wire} else ())"
        if attrs.has(item):
            # Nested plans are compiled first (value types never nest in cycles) and called directly.
            nested = plan_for(item)
            namespace[f"{slot}_encode"], namespace[f"{slot}_decode"] = (
                nested.encode_into,
                nested.decode_nested,
            )
            return (
                f"_encode_all({slot}_encode, {value}, {wire})",
                f"tuple([{slot}_decode(item) for item in {wire}])",
            )
    if isinstance(hint, type) and attrs.has(hint):
        nested = plan_for(hint)
        namespace[f"{slot}_encode"], namespace[f"{slot}_decode"] = nested.encode_into, nested.decode_nested
        return f"{slot}_encode({value}, {wire})", f"{slot}_decode({wire})"
    raise InternalError(detail=f"field {name!r} has a type the wire mapping does not know: {hint!r}")


@attrs.frozen(kw_only=True)
class DecodedColumns:
    """Values built from columns (`decode_columns`), with the columns they were built from."""

    values: list[Any]
    """The values, in record order."""
    fields: dict[str, list[Any]]
    """Each field's values, converted as stored, in record order (what a caller keys the values by)."""


_CHUNK = 1024
"""Values filled at a time, a field after another, so that a chunk (~200 KB of 17-field values) stays in the CPU's
cache while each of its fields is stored, where the whole list, a field at a time, would be walked 17 times. The gain
measured is small: a 100,000-endpoint checkpoint in a heap holding two other states, best of 4 under load 3-4,
decoded in 0.326-0.331 s unchunked, 0.309 s at 4,096, 0.304-0.327 s at 1,024, 0.279 s at 256 (near the noise)."""


def decode_columns(cls: type[Any], columns: Message, messages: Sequence[Message]) -> DecodedColumns:
    """Build the values of `messages` (one or more `cls` messages) as `decode_nested` builds each one, a field at a
    time.

    `columns` is the same records parsed into a *column view* of the message (every field repeated: see
    `aether.core.events.batch`) from their canonical bytes (each field written once when set, omitted at its zero
    value): a scalar column holding one entry per record, or none, gives that field of every record in one
    conversion; a scalar column holding some other count, and a list or map column holding any, is read from each
    message. `cls` must be a class `decode_nested` stores slot by slot (see `_slot_setters`) whose fields are
    scalars, int enums, string maps and tuples of strings or ints (as `Endpoint`).

    Raises:
        KeyError: an enum value is not a member of its enum (as `decode_nested`).
    """
    slots = _slot_setters(cls)
    if slots is None:
        raise InternalError(
            detail=f"{cls.__qualname__} is not stored slot by slot: it cannot decode as columns"
        )
    hints = typing.get_type_hints(cls)
    fields: dict[str, list[Any]] = {}
    stores: list[tuple[Callable[[Any, Any], None], Iterator[Any]]] = []
    for field in attrs.fields(cls):
        column = fields[field.name] = _column(field.name, hints[field.name], columns, messages)
        if field.converter is not None and field.converter not in _NO_OP_ON_DECODED:
            column = fields[field.name] = list(map(field.converter, column))
        stores.append((slots[field.name], iter(column)))
    values: list[Any] = list(map(object.__new__, itertools.repeat(cls, len(messages))))
    for start in range(0, len(values), _CHUNK):
        chunk = values[start : start + _CHUNK]
        for store, column_values in stores:
            # `map` stops at the chunk's end before taking from the column: each store takes the chunk's own values.
            deque(map(store, chunk, column_values), maxlen=0)
    return DecodedColumns(values=values, fields=fields)


def _column(name: str, hint: Any, columns: Message, messages: Sequence[Message]) -> list[Any]:
    """Return field `name` of every record, converted as `decode_nested` converts it."""
    count = len(messages)
    column = getattr(columns, name)
    each = map(getattr, messages, itertools.repeat(name))
    origin = typing.get_origin(hint)
    if hint in (str, int, bool):
        return [hint()] * count if not column else list(column if len(column) == count else each)
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum):
        member = {item.value: item for item in hint}.__getitem__
        if not column:
            return [member(0)] * count
        return list(map(member, column if len(column) == count else each))
    if origin is immutables.Map:
        return [_EMPTY_MAP] * count if not column else list(map(_from_pairs, each))
    if origin is tuple and typing.get_args(hint)[0] in (str, int):
        return [()] * count if not column else [tuple(items) if items else () for items in each]
    raise InternalError(detail=f"field {name!r} has a type columns do not decode: {hint!r}")
