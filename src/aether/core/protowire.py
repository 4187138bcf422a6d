"""Protobuf's wire format, the two pieces Aether writes by hand: base-128 varints and length-delimited fields.

Where bytes are assembled from serialized parts instead of re-serializing a whole message (route tables joined
from their virtual hosts, log records framed as one column batch, OTLP spans), the glue between the parts is a
field's tag and its length, both varints. One encoder serves them all.
"""

from __future__ import annotations

__all__ = ["length_delimited", "varint"]

_SMALL = tuple(bytes((value,)) for value in range(0x80))
"""The one-byte varints, made once: most tags and many lengths are below 128."""


def varint(value: int) -> bytes:
    """Return `value` (not negative) as a protobuf base-128 varint: seven bits a byte, low groups first, the high
    bit set on every byte but the last."""
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(number: int, body: bytes) -> bytes:
    """Return one occurrence of field `number` holding `body` (wire type 2: its tag, its length, the bytes)."""
    return varint(number << 3 | 2) + varint(len(body)) + body
