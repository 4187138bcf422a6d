"""SotW responses assembled from encoded blocks are byte for byte the response serialized whole."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2

from aether.core.snapshot import ENDPOINT_TYPE, Resource
from aether.xds.encoding import BLOCK_SIZE, EncodedResources, EncodedResponse
from tests.xds._snapshots import assignment


def _whole(resources: dict[str, Resource], *, version: str, nonce: str) -> bytes:
    message = discovery_pb2.DiscoveryResponse(version_info=version, type_url=ENDPOINT_TYPE, nonce=nonce)
    for resource in resources.values():
        resource.pack_into(message.resources.add())
    return message.SerializeToString()


def _response(encoded: EncodedResources, resources: dict[str, Resource], nonce: str) -> EncodedResponse:
    return encoded.response(resources, type_url=ENDPOINT_TYPE, version="v" + nonce, nonce=nonce)


def test_a_response_of_blocks_is_the_response_serialized_whole_through_updates_inserts_and_removals() -> None:
    """After any change noted, the response equals the whole message's bytes (blocks split and emptied too)."""
    names = [f"c{index:04d}" for index in range(0, 6 * BLOCK_SIZE, 2)]
    resources = {name: assignment(name, 1) for name in names}
    encoded = EncodedResources(resources)
    steps: list[tuple[str, Resource | None]] = [
        (names[5], assignment(names[5], 2)),  # updated in place
        ("c0001", assignment("c0001", 1)),  # inserted into the first block
        ("a", assignment("a", 1)),  # before every name
        ("z", assignment("z", 1)),  # after every name
        (names[0], None),  # removed
        # Into the first block until it splits.
        *((f"c0000-{index:03d}", assignment(f"c0000-{index:03d}", 3)) for index in range(2 * BLOCK_SIZE + 1)),
        *((name, None) for name in [*names[2 * BLOCK_SIZE :], "z"]),  # the last block emptied
    ]
    for number, (name, after) in enumerate(steps, start=1):
        if after is None:
            del resources[name]
        else:
            resources[name] = after
        resources = dict(sorted(resources.items()))
        encoded.changed(name, held=after is not None)
        response = _response(encoded, resources, str(number))
        assert response.data == _whole(resources, version="v" + str(number), nonce=str(number))
    assert [item.value for item in response.resources] == [resource.body for resource in resources.values()]


def test_an_empty_selection_answers_an_empty_response_and_takes_a_first_resource() -> None:
    """No names: the response carries no resources; a name held later goes in."""
    encoded = EncodedResources({})
    assert _response(encoded, {}, "1").data == _whole({}, version="v1", nonce="1")
    resources = {"a": assignment("a", 1)}
    encoded.changed("a", held=True)
    assert _response(encoded, resources, "2").data == _whole(resources, version="v2", nonce="2")
