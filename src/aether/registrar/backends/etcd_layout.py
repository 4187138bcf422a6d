"""Where the etcd backend keeps endpoints: the key layout, the values, and the registrar versions of etcd revisions.

Pure functions of bytes and numbers, so the layout can be tested without an etcd.

Layout (the original Aether's, `registry/internal/etcd/etcd.go`)::

    <root>/<region>/clusters/<cluster>                                      this registrar's partition
        /ns/<ns>/services/<sa>/protocols/<PROTOCOL_HTTP|PROTOCOL_TCP>/endpoints/<ip>   a ServiceEndpoint (binary)
        /epoch                                                              the store's epoch (decimal)
        /sync                                                               written to learn a watch caught up
"""

from __future__ import annotations

import attrs
from google.protobuf.message import DecodeError

from aether.core.events.registry import Endpoint, EndpointKey, Protocol
from aether.proto.registry.v1 import registry_pb2
from aether.registrar.convert import check_ip, check_service_key, endpoint_from_proto, endpoint_to_proto
from aether.registrar.errors import InvalidRequestError

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_REGION",
    "DEFAULT_ROOT",
    "EPOCH_BITS",
    "REVISION_BITS",
    "Partition",
    "epoch_of",
    "prefix_end",
    "revision_of",
    "value_of",
    "version_of",
]

DEFAULT_ROOT = "/aether/v1/regions"
DEFAULT_REGION = "local"
DEFAULT_CLUSTER = "local"

REVISION_BITS = 44
"""Low bits of a registrar version: the etcd revision (17.6 trillion revisions; etcd would need centuries)."""

EPOCH_BITS = 19
"""High bits of a registrar version: the store's epoch, so versions stay under 2**63 (int64 on the wire)."""

_PROTOCOL_SEGMENTS = {
    Protocol.HTTP: registry_pb2.Service.Protocol.Name(registry_pb2.Service.PROTOCOL_HTTP),
    Protocol.TCP: registry_pb2.Service.Protocol.Name(registry_pb2.Service.PROTOCOL_TCP),
}
_PROTOCOLS = {segment: protocol for protocol, segment in _PROTOCOL_SEGMENTS.items()}


def version_of(revision: int, *, epoch: int) -> int:
    """Return the registrar version of etcd `revision` in the store of `epoch`.

    Every registrar replica on the same etcd maps a revision to the same version, so an agent resumes against
    any of them; a different store (another epoch) never shares versions with this one, so a resume presented
    to it resyncs (its floor and its versions lie in another range) instead of trusting a revision of another store.
    """
    assert 0 <= epoch < 1 << EPOCH_BITS, f"epoch {epoch} out of range; this is a bug"
    assert 0 <= revision < 1 << REVISION_BITS, f"revision {revision} out of range; this is a bug"
    return epoch << REVISION_BITS | revision


def revision_of(version: int) -> int:
    """Return the etcd revision inside a registrar version."""
    return version & ((1 << REVISION_BITS) - 1)


def epoch_of(text: bytes) -> int:
    """Return the epoch stored in the epoch key.

    Raises:
        ValueError: It is not a decimal number of at most `EPOCH_BITS` bits.
    """
    value = int(text.decode("ascii"))
    if not 0 <= value < 1 << EPOCH_BITS:
        raise ValueError(f"epoch: must be 0..{(1 << EPOCH_BITS) - 1} (got {value!r})")
    return value


def prefix_end(prefix: bytes) -> bytes:
    """Return the range end that covers every key starting with `prefix` (etcd's `WithPrefix`)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@attrs.frozen(kw_only=True)
class Partition:
    """One registrar cluster's subtree: `<root>/<region>/clusters/<cluster>`; it writes and reads only there."""

    root: str = DEFAULT_ROOT
    region: str = DEFAULT_REGION
    cluster: str = DEFAULT_CLUSTER

    @property
    def path(self) -> str:
        """`<root>/<region>/clusters/<cluster>`."""
        return f"{self.root.rstrip('/')}/{self.region}/clusters/{self.cluster}"

    @property
    def prefix(self) -> bytes:
        """The prefix of every key of the partition (what the backend watches)."""
        return f"{self.path}/".encode()

    @property
    def sync_key(self) -> bytes:
        """The key a backend writes to learn when its watch has caught up (its value means nothing)."""
        return f"{self.path}/sync".encode()

    @property
    def endpoints_prefix(self) -> bytes:
        """The prefix of every endpoint key (what the backend lists)."""
        return f"{self.path}/ns/".encode()

    @property
    def epoch_key(self) -> bytes:
        """The key holding the store's epoch."""
        return f"{self.path}/epoch".encode()

    def key(self, key: EndpointKey) -> bytes:
        """Return the etcd key of the endpoint `(service, protocol, ip)`."""
        service, protocol, ip = key
        namespace, _, account = service.partition("/")
        return (
            f"{self.path}/ns/{namespace}/services/{account}/protocols/{_PROTOCOL_SEGMENTS[protocol]}"
            f"/endpoints/{ip}"
        ).encode()

    def endpoint_key(self, key: bytes) -> EndpointKey:
        """Return the `(service, protocol, ip)` an etcd key names.

        Raises:
            InvalidRequestError: The key is not an endpoint key of this layout.
        """
        text = key.decode("utf-8", errors="replace")
        rest = text.removeprefix(self.path + "/")
        parts = rest.split("/")
        rule = (
            "must be <partition>/ns/<ns>/services/<sa>/protocols/<PROTOCOL_HTTP|PROTOCOL_TCP>/endpoints/<ip>"
        )
        if (
            rest == text
            or len(parts) != 8
            or (parts[0], parts[2], parts[4], parts[6]) != ("ns", "services", "protocols", "endpoints")
            or parts[5] not in _PROTOCOLS
        ):
            raise InvalidRequestError("etcd key", rule=rule, value=text)
        service = check_service_key(f"{parts[1]}/{parts[3]}", field="etcd key")
        return (service, _PROTOCOLS[parts[5]], check_ip(parts[7], field="etcd key"))

    def endpoint(self, key: bytes, value: bytes) -> Endpoint:
        """Return the endpoint stored at `key` with `value` (a binary `ServiceEndpoint`).

        Raises:
            InvalidRequestError: The key is no endpoint key, the value does not decode or breaks a rule, or its
                ip differs from the key's.
        """
        service, protocol, ip = self.endpoint_key(key)
        try:
            message = registry_pb2.ServiceEndpoint.FromString(value)
        except DecodeError as exc:
            raise InvalidRequestError(
                "etcd value", rule="must be a binary ServiceEndpoint", value=key
            ) from exc
        endpoint = endpoint_from_proto(message, service=service, protocol=protocol)
        if endpoint.ip != ip:
            raise InvalidRequestError("etcd value", rule=f"must have the key's ip {ip!r}", value=endpoint.ip)
        return endpoint


def value_of(endpoint: Endpoint) -> bytes:
    """Return the stored form of `endpoint`: its binary `ServiceEndpoint` (deterministic)."""
    return endpoint_to_proto(endpoint).SerializeToString(deterministic=True)
