"""Small builders of Envoy message parts every projection module uses: packed configs, durations, addresses.

xds-protos ships no type stubs: every Envoy message is `Any` to mypy.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from envoy.config.core.v3 import address_pb2, config_source_pb2
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message


def pack(message: Message) -> any_pb2.Any:
    """Return `message` in an `Any` (deterministic bytes, so equal configs pack to equal bytes)."""
    packed = any_pb2.Any()
    packed.Pack(message, deterministic=True)
    return packed


def milliseconds(value: int) -> duration_pb2.Duration:
    """Return a Duration of `value` milliseconds."""
    return duration_pb2.Duration(seconds=value // 1000, nanos=(value % 1000) * 1_000_000)


def seconds(value: int) -> duration_pb2.Duration:
    """Return a Duration of `value` seconds."""
    return duration_pb2.Duration(seconds=value)


@functools.cache
def ads() -> Any:
    """Return the config source of everything the node gets from the agent: the ADS stream, xDS v3.

    One shared message (built once: projections embed it thousands of times): embed it, which copies; never
    mutate it.
    """
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(), resource_api_version=config_source_pb2.V3
    )


def socket_address(host: str, port: int, *, netns: str = "") -> Any:
    """Return an Address for `host:port`, created in the network namespace at `netns` when given."""
    return address_pb2.Address(
        socket_address=address_pb2.SocketAddress(
            address=host, port_value=port, network_namespace_filepath=netns
        )
    )


def shared_parts(body: bytes, pieces: Iterable[bytes]) -> tuple[bytes, ...]:
    """Return `body` cut into parts where each of `pieces` occurs (in order, each at most once, searched after the
    previous one): those parts are the very `pieces` objects, shared by reference with every other body cut so.

    The parts joined are always `body` (a piece not found is simply not cut out): a snapshot resource may keep its
    bytes so, a common part held once for thousands of resources.
    """
    parts: list[bytes] = []
    start = 0
    for piece in pieces:
        at = body.find(piece, start)
        if at < 0 or not piece:
            continue
        if at > start:
            parts.append(body[start:at])
        parts.append(piece)
        start = at + len(piece)
    if start < len(body):
        parts.append(body[start:])
    return tuple(parts)
