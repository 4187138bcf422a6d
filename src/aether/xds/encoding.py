"""SotW responses assembled from serialized pieces: a named subscription's resources kept encoded in blocks, so a
push re-encodes only the blocks whose resources changed.

Serialized protobuf messages concatenate into the message holding the fields of both (repeated fields in order), and
protobuf serializes fields in field-number order. So a `DiscoveryResponse` is its `version_info` (field 1), then its
`resources` (2) block by block, then `type_url` (4) and `nonce` (5), each serialized alone: byte for byte what
serializing the whole message gives (tests/xds/test_encoding.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

import attrs
from envoy.service.discovery.v3 import discovery_pb2

from aether.core.snapshot import Resource

__all__ = ["EncodedResources", "EncodedResponse"]

BLOCK_SIZE = 64
"""Resources per block: a change re-encodes one block (64 copies, ~30 us) and the push joins ~N/64 blocks; smaller
blocks would make the join longer than the re-encoding saves, larger ones the other way round."""


@attrs.frozen(kw_only=True)
class EncodedResponse:
    """A `DiscoveryResponse` already serialized, with the fields the server and its telemetry read."""

    type_url: str
    version_info: str
    nonce: str
    data: bytes = attrs.field(repr=False)

    def SerializeToString(self) -> bytes:  # the protobuf method the server calls
        return self.data

    def message(self) -> discovery_pb2.DiscoveryResponse:
        """The response parsed (for tests and debugging: the server sends `data`)."""
        return discovery_pb2.DiscoveryResponse.FromString(self.data)

    @property
    def resources(self) -> list[object]:
        """The response's resources, parsed (as `message().resources`)."""
        return list(self.message().resources)


@attrs.define(kw_only=True)
class _Block:
    names: list[str]
    """In name order; every name of the block sorts at or after the first (`EncodedResources` finds blocks by it)."""
    data: bytes | None = None
    """The block's resources serialized as a `DiscoveryResponse`'s `resources` field; None: to be encoded."""


class EncodedResources:
    """The resources of a named subscription, in name order, kept serialized in blocks of about `BLOCK_SIZE`.

    Args:
        names: The names held, in name order.
    """

    def __init__(self, names: Iterable[str]) -> None:
        ordered = list(names)
        self._blocks = [
            _Block(names=ordered[start : start + BLOCK_SIZE]) for start in range(0, len(ordered), BLOCK_SIZE)
        ]
        self._firsts = [block.names[0] for block in self._blocks]

    def changed(self, name: str, *, held: bool) -> None:
        """Note that `name`'s resource changed: it is now `held`, or gone."""
        index = max(bisect.bisect_right(self._firsts, name) - 1, 0)
        if not self._blocks:
            if held:
                self._blocks.append(_Block(names=[name]))
                self._firsts.append(name)
            return
        block = self._blocks[index]
        block.data = None
        position = bisect.bisect_left(block.names, name)
        present = position < len(block.names) and block.names[position] == name
        if held and not present:
            block.names.insert(position, name)
            if len(block.names) > 2 * BLOCK_SIZE:
                half = len(block.names) // 2
                self._blocks.insert(index + 1, _Block(names=block.names[half:]))
                del block.names[half:]
        elif present and not held:
            del block.names[position]
            if not block.names:
                del self._blocks[index]
        else:
            return  # the names are as they were: so are the blocks' first names
        self._firsts = [block.names[0] for block in self._blocks]

    def response(
        self, resources: Mapping[str, Resource], *, type_url: str, version: str, nonce: str
    ) -> EncodedResponse:
        """Return the response carrying `resources` (what the names map to), encoding only the blocks that changed."""
        pieces = [discovery_pb2.DiscoveryResponse(version_info=version).SerializeToString()]
        for block in self._blocks:
            if block.data is None:
                encoding = discovery_pb2.DiscoveryResponse()
                for name in block.names:
                    resources[name].pack_into(encoding.resources.add())
                block.data = encoding.SerializeToString()
            pieces.append(block.data)
        pieces.append(discovery_pb2.DiscoveryResponse(type_url=type_url, nonce=nonce).SerializeToString())
        return EncodedResponse(type_url=type_url, version_info=version, nonce=nonce, data=b"".join(pieces))
