"""A SPIFFE Workload API client: this process's own X.509-SVID and the trust bundles (its trust domain's and the
federated ones), streamed from the SPIFFE implementation's Workload Endpoint (SPIRE's agent socket) and sent to the
journal as they change.

Two streams on one connection to the Unix socket, each with the `workload.spiffe.io: true` header:

- `FetchX509Bundles`: every bundle the process trusts. Each message is the full set, so a bundle missing from it
  is removed (`TrustBundleRemoved`); a new or changed one is sent as `TrustBundleRotated`.
- `FetchX509SVID`: the process's SVIDs. The first is its default identity: it names the trust domain of the mesh
  (`WorkloadIdentity.trust_domain`) and is what the agent presents to the Broker Endpoint and the registrar
  (`WorkloadIdentity.tls_material`). With `publish_svids` (the edge, or an agent without a broker), every SVID is
  also sent to the journal as `SvidRotated` (checked: `aether.identity.x509.check_svid`), and one that a later
  message no longer holds as `SvidRemoved`.

A broken connection or a stream that fails is redialled after a jittered backoff (`aether.rpc.backoff`); the state
the source holds (and the journal's) stays in force meanwhile, so Envoy keeps what it has. Rotation is a new
message on the stream: nothing restarts. Each SVID sent is re-sent when its `not_after` passes
(`aether.identity.recheck`), so one that expires while the endpoint is silent or gone stops being served.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio
from purerpc.grpc_proto import GRPCProtoSocket

from aether.core.events import Event, SvidRemoved, SvidRotated, TrustBundleRemoved, TrustBundleRotated
from aether.identity.recheck import Rechecks
from aether.identity.streams import SPIFFE_BACKOFF, WORKLOAD_HEADER, server_stream
from aether.identity.x509 import (
    bundle_from_der,
    der_to_pem_certificates,
    key_der_to_pem,
    not_before_of_chain,
    report_http3,
    svid_from_der,
    trust_domain_of_id,
)
from aether.proto.spiffe.v1 import workload_pb2
from aether.rpc.backoff import Backoff
from aether.rpc.calls import CONNECTION_ERRORS, open_grpc_socket
from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.listen import ListenAddress
from aether.sync import LatestValue, first_leaf

__all__ = [
    "ENDPOINT_SOCKET_ENV",
    "SERVICE_NAME",
    "SOURCE",
    "TlsMaterial",
    "WorkloadApiStatistics",
    "WorkloadIdentity",
    "endpoint_socket_from_env",
    "serve_workload_api",
]

LOG = logging.getLogger("aether.identity.workload_api")

SERVICE_NAME = "SpiffeWorkloadAPI"
"""The Workload API's gRPC service (it lives in no protobuf package)."""
ENDPOINT_SOCKET_ENV = "SPIFFE_ENDPOINT_SOCKET"
"""The environment variable that locates the Workload Endpoint (`unix:///path` or a bare path)."""
SOURCE = "spiffe-workload-api"
"""The `source` of the events this client sends."""


def endpoint_socket_from_env(
    environ: dict[str, str] | None = None, *, variable: str = ENDPOINT_SOCKET_ENV, what: str = "Workload API"
) -> Path | None:
    """Return the Unix socket `variable` (default `SPIFFE_ENDPOINT_SOCKET`) names (`unix:///path`, `unix:/path` or
    a path), or None; `what` names the endpoint in the error.

    Raises:
        ValueError: It is set to something else (a `tcp://` endpoint: Aether dials the Unix socket only).
    """
    value = (os.environ if environ is None else environ).get(variable, "")
    if not value:
        return None
    if value.startswith("unix://"):
        value = value.removeprefix("unix://")
    elif value.startswith("unix:"):
        value = value.removeprefix("unix:")
    if not value.startswith("/"):
        raise ValueError(f"{variable}={value!r}: want unix:///absolute/path of the SPIFFE {what} socket")
    return Path(value)


@attrs.frozen(kw_only=True)
class TlsMaterial:
    """An SVID and bundle as PEM, for a TLS context (`aether.identity.tls.tls_context`)."""

    spiffe_id: str
    cert_chain_pem: bytes
    private_key_pem: bytes
    bundle_pem: bytes
    """The CA certificates of the SVID's trust domain."""
    not_after: int


@attrs.frozen(kw_only=True)
class WorkloadApiStatistics:
    """Counters of a Workload API client."""

    connects: int
    """Connections on which both streams started."""
    failures: int
    """Connections or streams that failed (each followed by a backoff)."""
    svid_messages: int
    bundle_messages: int
    events_sent: int
    trust_domain: str
    """The trust domain of the default SVID ('' before the first)."""
    spiffe_id: str
    """The default SVID's SPIFFE ID ('' before the first)."""
    last_error: str
    longest_wait: float
    """The longest wait in seconds before a redial so far (at most the backoff's cap)."""


class WorkloadIdentity:
    """What `serve_workload_api` hands to `task_status.started`: the process's identity as last streamed."""

    def __init__(self) -> None:
        self.trust_domain = ""
        """The trust domain of the default SVID ('' until the first arrived)."""
        self._material: TlsMaterial | None = None
        self._bundles: dict[str, bytes] = {}
        self._ready = trio.Event()
        self.material_version: LatestValue[int] = LatestValue(0)
        """Bumped whenever the default SVID or a bundle changes: `aether.identity.renewal` follows it."""
        self.connects = self.failures = self.svid_messages = self.bundle_messages = self.events_sent = 0
        self.last_error = ""
        self.longest_wait = 0.0

    @property
    def bundles_pem(self) -> dict[str, bytes]:
        """The trusted bundles as PEM, by trust domain (a copy)."""
        return dict(self._bundles)

    def tls_material(self) -> TlsMaterial | None:
        """The default SVID and its trust domain's bundle, or None before both arrived."""
        material = self._material
        if material is None:
            return None
        bundle = self._bundles.get(self.trust_domain, material.bundle_pem)
        return attrs.evolve(material, bundle_pem=bundle)

    async def wait_ready(self) -> None:
        """Block until the default SVID and the bundles have arrived."""
        await self._ready.wait()

    def statistics(self) -> WorkloadApiStatistics:
        """Return the client's counters."""
        return WorkloadApiStatistics(
            connects=self.connects,
            failures=self.failures,
            svid_messages=self.svid_messages,
            bundle_messages=self.bundle_messages,
            events_sent=self.events_sent,
            trust_domain=self.trust_domain,
            spiffe_id="" if self._material is None else self._material.spiffe_id,
            last_error=self.last_error,
            longest_wait=self.longest_wait,
        )

    def _check_ready(self) -> None:
        if self._material is not None and self._bundles:
            self._ready.set()
        self.material_version.set(self.material_version.value + 1)


class _Client:
    def __init__(
        self,
        *,
        target: ListenAddress,
        send: trio.MemorySendChannel[Event],
        publish_svids: bool,
        clock: Callable[[], int],
    ) -> None:
        self.identity = WorkloadIdentity()
        self._target = target
        self._send = send
        self._publish = publish_svids
        self._clock = clock
        self._bundle_digests: dict[str, bytes] = {}
        self._svids: dict[str, workload_pb2.X509SVID] = {}
        """The SVIDs last streamed, by SPIFFE ID."""
        self._sent: dict[str, bytes] = {}
        """The digest of each SVID as last sent, by SPIFFE ID."""
        self.rechecks = Rechecks(clock=clock)

    async def _emit(self, event: Event) -> None:
        await self._send.send(event)
        self.identity.events_sent += 1

    async def run_connection(self) -> None:
        async with open_grpc_socket(self._target) as grpc_socket, trio.open_nursery() as nursery:
            self.identity.connects += 1
            nursery.start_soon(self._bundle_stream, grpc_socket)
            nursery.start_soon(self._svid_stream, grpc_socket)

    async def _bundle_stream(self, grpc_socket: GRPCProtoSocket) -> None:
        async for message in server_stream(
            grpc_socket,
            service=SERVICE_NAME,
            method="FetchX509Bundles",
            request=workload_pb2.X509BundlesRequest(),
            response_type=workload_pb2.X509BundlesResponse,
            header=WORKLOAD_HEADER,
        ):
            self.identity.bundle_messages += 1
            await self._bundles(dict(message.bundles))

    async def _bundles(self, bundles: dict[str, bytes]) -> None:
        now = self._clock()
        by_domain = {trust_domain_of_id(key) or key: value for key, value in bundles.items()}
        for domain in sorted(self._bundle_digests.keys() - by_domain.keys()):
            del self._bundle_digests[domain]
            self.identity._bundles.pop(domain, None)
            await self._emit(TrustBundleRemoved(observed_at=now, source=SOURCE, trust_domain=domain))
        for domain in sorted(by_domain):
            digest = hashlib.sha256(by_domain[domain]).digest()
            if self._bundle_digests.get(domain) == digest:
                continue
            self._bundle_digests[domain] = digest
            bundle = bundle_from_der(by_domain[domain], trust_domain=domain)
            if not bundle.problem:
                self.identity._bundles[domain] = bundle.bundle_pem
            await self._emit(TrustBundleRotated(observed_at=now, source=SOURCE, bundle=bundle))
        self.identity._check_ready()
        # A bundle that arrives after an SVID may make that SVID's chain verifiable now.
        for spiffe_id in sorted(self._svids):
            await self._publish_svid(spiffe_id, now=now)

    async def _svid_stream(self, grpc_socket: GRPCProtoSocket) -> None:
        async for message in server_stream(
            grpc_socket,
            service=SERVICE_NAME,
            method="FetchX509SVID",
            request=workload_pb2.X509SVIDRequest(),
            response_type=workload_pb2.X509SVIDResponse,
            header=WORKLOAD_HEADER,
        ):
            self.identity.svid_messages += 1
            await self._svid_message(message)

    async def _svid_message(self, message: workload_pb2.X509SVIDResponse) -> None:
        if not message.svids:
            # Mandatory field at its default: report and discard (the spec's client behaviour).
            self.identity.last_error = "a FetchX509SVID message without any SVID was discarded"
            LOG.warning("%s", self.identity.last_error)
            return
        now = self._clock()
        default = message.svids[0]
        domain = trust_domain_of_id(default.spiffe_id)
        self.identity.trust_domain = domain
        try:
            chain_pem = der_to_pem_certificates(default.x509_svid)
            own_bundle = der_to_pem_certificates(default.bundle)
            key_pem = key_der_to_pem(default.x509_svid_key)
        except ValueError as exc:
            self.identity.last_error = f"the default SVID {default.spiffe_id!r} does not parse: {exc}"
            LOG.warning("%s", self.identity.last_error)
        else:
            svid = svid_from_der(
                default.x509_svid,
                default.x509_svid_key,
                spiffe_id=default.spiffe_id,
                bundle_pem=own_bundle,
                trust_domain=domain,
                now=now,
            )
            self.identity._material = TlsMaterial(
                spiffe_id=default.spiffe_id,
                cert_chain_pem=chain_pem,
                private_key_pem=key_pem,
                bundle_pem=own_bundle,
                not_after=svid.not_after,
            )
            self.identity._bundles.setdefault(domain, own_bundle)
            self.identity._check_ready()
        if not self._publish:
            return
        fresh = {svid.spiffe_id: svid for svid in message.svids}
        for spiffe_id in sorted(self._svids.keys() - fresh.keys()):
            del self._svids[spiffe_id]
            self._sent.pop(spiffe_id, None)
            self.rechecks.forget(spiffe_id)
            await self._emit(SvidRemoved(observed_at=now, source=SOURCE, spiffe_id=spiffe_id))
        self._svids = fresh
        for spiffe_id in sorted(fresh):
            await self._publish_svid(spiffe_id, now=now)

    async def _publish_svid(self, spiffe_id: str, *, now: int, again: bool = False) -> None:
        """Send the SVID of `spiffe_id` as last streamed, checked at `now`, if it changed (or `again`)."""
        if not self._publish or spiffe_id not in self._svids:
            return
        message = self._svids[spiffe_id]
        domain = trust_domain_of_id(spiffe_id)
        bundle = self.identity._bundles.get(domain, b"")
        svid = svid_from_der(
            message.x509_svid,
            message.x509_svid_key,
            spiffe_id=spiffe_id,
            bundle_pem=bundle,
            trust_domain=self.identity.trust_domain or domain,
            now=now,
        )
        digest = _svid_digest(message, bundle=bundle, problem=svid.problem)
        if not again and self._sent.get(spiffe_id) == digest:
            return
        self._sent[spiffe_id] = digest
        self.rechecks.set(spiffe_id, (not_before_of_chain(message.x509_svid), svid.not_after))
        await self._emit(SvidRotated(observed_at=now, source=SOURCE, svid=report_http3(svid)))

    async def recheck(self, spiffe_id: str, now: int) -> None:
        await self._publish_svid(spiffe_id, now=now, again=True)


def _svid_digest(message: workload_pb2.X509SVID, *, bundle: bytes, problem: str) -> bytes:
    return hashlib.sha256(
        b"\0".join((message.x509_svid, message.x509_svid_key, bundle, problem.encode()))
    ).digest()


async def serve_workload_api(
    socket: Path,
    *,
    send: trio.MemorySendChannel[Event],
    publish_svids: bool = False,
    clock: Callable[[], int] = time.time_ns,
    backoff: Backoff = SPIFFE_BACKOFF,
    rng: random.Random | None = None,
    task_status: trio.TaskStatus[WorkloadIdentity] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Stream this process's identity and trust bundles from the Workload API at `socket` until cancelled.

    `task_status.started(identity)` is called at once (before the endpoint answers: it may be down at start);
    `WorkloadIdentity.wait_ready` waits for the first SVID and bundles.

    Args:
        socket: The Workload Endpoint's Unix socket (SPIRE agent: its `socket_path`).
        send: Where events go (`Journal.sender()`); the client owns it and closes it when it ends.
        publish_svids: Also send the SVIDs themselves to the journal (see the module docstring).
        clock: The wall clock in ns since the epoch, which stamps events and drives re-checks.
        backoff: Waits between reconnects (`SPIFFE_BACKOFF`: capped at 5 s); reset once a connection has
            delivered a message.
        rng: The jitter's randomness (seed it in tests).

    Error handling:
        The endpoint down, a connection broken, a stream failed with any status: logged, counted, redialled after
        the backoff; nothing sent before is withdrawn. A message that does not parse is reported in
        `statistics().last_error` and the log.
    """
    apply_purerpc_fixes()
    rng = random.Random() if rng is None else rng
    target = ListenAddress.unix(socket)
    async with send:
        client = _Client(target=target, send=send, publish_svids=publish_svids, clock=clock)
        task_status.started(client.identity)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.rechecks.serve, client.recheck)
            failures = 0
            while True:
                before = client.identity.svid_messages + client.identity.bundle_messages
                try:
                    await client.run_connection()
                except* CONNECTION_ERRORS as group:
                    error = first_leaf(group)
                    client.identity.last_error = f"{type(error).__name__}: {error}"
                    LOG.warning("SPIFFE Workload API at %s failed: %r", socket, error)
                client.identity.failures += 1
                delivered = client.identity.svid_messages + client.identity.bundle_messages > before
                failures = 1 if delivered else failures + 1
                wait = backoff.delay(failures, rng=rng)
                client.identity.longest_wait = max(client.identity.longest_wait, wait)
                await trio.sleep(wait)
