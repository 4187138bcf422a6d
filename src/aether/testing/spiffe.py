"""Faithful test servers of the SPIFFE Workload API and Broker API (no SPIRE can run here), generated from the same
protos as the clients (`aether.proto.spiffe.v1`), serving SVIDs minted with `aether.identity.mint`.

What they do as the published specs say:

- Every call must carry the endpoint's security header (`workload.spiffe.io: true`, `broker.spiffe.io: true`), or
  it fails with InvalidArgument.
- A stream's first message goes out at once, then a full message (never a delta) whenever what it carries changes.
- The Broker endpoint is mutual TLS only (a client without a certificate of the trust domain fails the
  handshake); a reference of a type the server does not take is InvalidArgument, a workload it does not know is
  NotFound, one not entitled (or revoked mid-stream) is PermissionDenied, one not attestable yet
  (`FakeBroker.unattestable`) is FailedPrecondition.

A test changes what they serve with `set_*` / `revoke`, and takes one down (`stop`) and back up (`serve` again).
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import purerpc
import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2

from aether.identity.mint import MintedSvid, TestCA
from aether.identity.tls import certificate_spiffe_id
from aether.proto.spiffe.v1 import broker_pb2, workload_pb2
from aether.rpc.calls import CONNECTION_ERRORS
from aether.rpc.listen import ListenAddress, current_peer_certificate, serve_grpc
from aether.sync import LatestValue

__all__ = ["FakeBroker", "FakeWorkloadApi", "svid_message"]


def _der_certificates(pem: bytes) -> bytes:
    return b"".join(
        certificate.public_bytes(serialization.Encoding.DER)
        for certificate in x509.load_pem_x509_certificates(pem)
    )


def _der_key(pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(pem, password=None)
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def svid_message(svid: MintedSvid, *, bundle_pem: bytes, spiffe_id: str | None = None) -> dict[str, Any]:
    """The fields of an `X509SVID` message (either API's) for `svid`, under `spiffe_id` (default: its own)."""
    return {
        "spiffe_id": svid.spiffe_id if spiffe_id is None else spiffe_id,
        "x509_svid": _der_certificates(svid.cert_chain_pem),
        "x509_svid_key": _der_key(svid.private_key_pem),
        "bundle": _der_certificates(bundle_pem),
    }


SECRET_TYPE_URL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"


def _packed(message: Any) -> Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _require_header(request: Any, header: tuple[str, str]) -> None:
    if tuple(header) not in {tuple(pair) for pair in request.custom_metadata}:
        raise purerpc.InvalidArgumentError(f"the security header {header[0]}: {header[1]} is missing")


class FakeWorkloadApi:
    """The SPIFFE Workload API of one workload (the agent or the edge): its SVIDs and the bundles it trusts."""

    def __init__(
        self, ca: TestCA, *, svids: Iterable[MintedSvid] = (), federated: Iterable[TestCA] = ()
    ) -> None:
        self.ca = ca
        self._svids: LatestValue[tuple[MintedSvid, ...]] = LatestValue(tuple(svids))
        self._bundles: LatestValue[dict[str, bytes]] = LatestValue(
            {f"spiffe://{authority.trust_domain}": authority.bundle_pem for authority in (ca, *federated)}
        )
        self.calls: dict[str, int] = {}
        """Calls received, by method (refused ones included)."""
        self.sds_nacks: list[str] = []
        """The error messages of the SDS responses Envoy rejected."""
        self._nursery: trio.Nursery | None = None
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()

    def set_svids(self, svids: Iterable[MintedSvid]) -> None:
        """Serve `svids` from now on (the first is the default); open streams get a new message."""
        self._svids.set(tuple(svids))

    def set_bundles(self, bundles: Mapping[str, bytes]) -> None:
        """Serve `bundles` (PEM by `spiffe://<td>`) from now on; open streams get a new message."""
        self._bundles.set(dict(bundles))

    def services(self) -> list[purerpc.Service]:
        """The services of the socket: the Workload API, and Envoy's SDS (SPIRE's agent serves both there)."""
        return [self.service(), self.sds_service()]

    def sds_service(self) -> purerpc.Service:
        """Envoy's `SecretDiscoveryService` (state of the world), as SPIRE's agent serves it on its socket: the
        secret named by the workload's SPIFFE ID (or `default`) is its SVID, the one named `spiffe://<td>` (or
        `ROOTCA`) is that trust domain's bundle; every change of either pushes a new response."""
        service = purerpc.Service("envoy.service.secret.v3.SecretDiscoveryService")
        service.add_method(
            "StreamSecrets",
            self._stream_secrets,
            purerpc.RPCSignature(
                purerpc.Cardinality.STREAM_STREAM,
                discovery_pb2.DiscoveryRequest,
                discovery_pb2.DiscoveryResponse,
            ),
        )
        return service

    def _secrets(self, names: Iterable[str]) -> list[Any]:
        svids = self._svids.value
        bundles = self._bundles.value
        found = []
        for name in sorted(set(names)):
            svid = next((item for item in svids if item.spiffe_id == name), None)
            if name == "default" and svids:
                svid = svids[0]
            if svid is not None:
                secret = secret_pb2.Secret(name=name)
                secret.tls_certificate.certificate_chain.inline_bytes = svid.cert_chain_pem
                secret.tls_certificate.private_key.inline_bytes = svid.private_key_pem
                found.append(secret)
                continue
            bundle = bundles.get(f"spiffe://{self.ca.trust_domain}" if name == "ROOTCA" else name)
            if bundle is not None:
                secret = secret_pb2.Secret(name=name)
                secret.validation_context.trusted_ca.inline_bytes = bundle
                found.append(secret)
        return found

    async def _stream_secrets(
        self, requests: AsyncIterator[discovery_pb2.DiscoveryRequest], request: Any
    ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        self._count("StreamSecrets")
        assert self._nursery is not None, "serve() runs the stream's helpers"
        send, receive = trio.open_memory_channel[discovery_pb2.DiscoveryRequest | None](16)
        scope = trio.CancelScope()

        async def pump(out: trio.MemorySendChannel[Any]) -> None:
            async with out:
                try:
                    async for item in requests:
                        await out.send(item)
                except CONNECTION_ERRORS:
                    pass  # Envoy went away: the stream is over
                finally:
                    scope.cancel()  # the stream is over: so are its watchers, and the handler's receive ends

        async def watch(cell: LatestValue[Any], out: trio.MemorySendChannel[Any]) -> None:
            async with out:
                seen = cell.value
                while True:
                    seen = await cell.wait_changed(seen)
                    await out.send(None)

        async def helpers() -> None:
            # The handler is an async generator, which must not hold a nursery across a yield: its helpers run
            # in the server's nursery, and end with the stream.
            with scope, send:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch, self._svids, send.clone())
                    nursery.start_soon(watch, self._bundles, send.clone())
                    nursery.start_soon(pump, send.clone())

        self._nursery.start_soon(helpers)
        names: tuple[str, ...] = ()
        version = 0
        try:
            async with receive:
                async for item in receive:
                    if item is not None:
                        if item.error_detail.code:
                            self.sds_nacks.append(item.error_detail.message)
                        asked = tuple(sorted(item.resource_names))
                        if item.response_nonce and asked == names:
                            continue  # an ACK (or NACK) of what was sent: nothing new to say
                        names = asked
                    version += 1
                    yield discovery_pb2.DiscoveryResponse(
                        version_info=str(version),
                        type_url=SECRET_TYPE_URL,
                        nonce=str(version),
                        resources=[_packed(secret) for secret in self._secrets(names)],
                    )
        finally:
            scope.cancel()

    def service(self) -> purerpc.Service:
        service = purerpc.Service("SpiffeWorkloadAPI")
        stream = purerpc.Cardinality.UNARY_STREAM
        service.add_method(
            "FetchX509SVID",
            self._fetch_svid,
            purerpc.RPCSignature(stream, workload_pb2.X509SVIDRequest, workload_pb2.X509SVIDResponse),
        )
        service.add_method(
            "FetchX509Bundles",
            self._fetch_bundles,
            purerpc.RPCSignature(stream, workload_pb2.X509BundlesRequest, workload_pb2.X509BundlesResponse),
        )
        return service

    def _count(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1

    async def _fetch_svid(
        self, message: workload_pb2.X509SVIDRequest, request: Any
    ) -> AsyncIterator[workload_pb2.X509SVIDResponse]:
        self._count("FetchX509SVID")
        _require_header(request, ("workload.spiffe.io", "true"))
        seen = None
        while True:
            svids = self._svids.value if seen is None else await self._svids.wait_changed(seen)
            seen = svids
            if not svids:
                # SPIRE answers PermissionDenied to a workload with no identity.
                raise purerpc.PermissionDeniedError("no identity issued")
            federated = {
                key: _der_certificates(pem)
                for key, pem in sorted(self._bundles.value.items())
                if key != f"spiffe://{self.ca.trust_domain}"
            }
            yield workload_pb2.X509SVIDResponse(
                svids=[
                    workload_pb2.X509SVID(**svid_message(svid, bundle_pem=self.ca.bundle_pem))
                    for svid in svids
                ],
                federated_bundles=federated,
            )

    async def _fetch_bundles(
        self, message: workload_pb2.X509BundlesRequest, request: Any
    ) -> AsyncIterator[workload_pb2.X509BundlesResponse]:
        self._count("FetchX509Bundles")
        _require_header(request, ("workload.spiffe.io", "true"))
        seen = None
        while True:
            bundles = self._bundles.value if seen is None else await self._bundles.wait_changed(seen)
            seen = bundles
            yield workload_pb2.X509BundlesResponse(
                bundles={key: _der_certificates(pem) for key, pem in sorted(bundles.items())}
            )

    async def serve(
        self, socket: Path, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve on the Unix socket `socket` until cancelled or `stop`ped."""
        self._stopped = trio.Event()
        with trio.CancelScope() as self._scope:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(
                    functools.partial(serve_grpc, self.services(), listen=ListenAddress.unix(socket))
                )
                task_status.started()
        self._stopped.set()

    async def stop(self) -> None:
        """Go down: the listener closes and every open stream breaks; returns once the socket is gone."""
        if self._scope is not None:
            self._scope.cancel()
            await self._stopped.wait()


@attrs.define
class _Workload:
    svids: tuple[MintedSvid, ...] = ()
    revoked: bool = False
    version: int = 0
    bundle_pem: bytes | None = None
    """The bundle sent with its SVIDs (None: the CA's)."""
    federated: dict[str, bytes] = attrs.Factory(dict)
    """Its federated bundles, PEM by `spiffe://<td>`."""


class FakeBroker:
    """A SPIFFE Broker Endpoint: SVIDs per pod (`<namespace>/<name>`), over mutual TLS on a Unix socket.

    `references` are the reference types it takes: 'kubernetes' (a `KubernetesObjectReference` to a pod) and
    'pid' (a `WorkloadPIDReference`, resolved through `pids`).
    """

    def __init__(
        self,
        ca: TestCA,
        *,
        directory: Path,
        references: frozenset[str] = frozenset({"kubernetes", "pid"}),
        broker_id: str | None = None,
    ) -> None:
        self.ca = ca
        self.references = references
        self.pids: dict[int, str] = {}
        """Which pod each PID belongs to (the server's own attestation, faked)."""
        self.unattestable: dict[str, int] = {}
        """How many more calls for a pod fail with FailedPrecondition (its reference resolves, but the workload
        cannot be attested yet: a WorkloadReferenceError), by pod."""
        self._workloads: dict[str, _Workload] = {}
        self._changed: LatestValue[int] = LatestValue(0)
        self.calls: list[tuple[str, str]] = []
        """(reference kind, pod or '') of every SubscribeToX509SVID call, in order."""
        self.callers: list[str] = []
        """The SPIFFE ID of each caller's client certificate, in order of calls."""
        self.open_streams: LatestValue[int] = LatestValue(0)
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._tls = self._context(directory, broker_id or f"spiffe://{ca.trust_domain}/spire/agent/broker")

    def _moved(self, pod: str, workload: _Workload, seen: int, _: int) -> bool:
        return self._workloads.get(pod) is not workload or workload.version != seen

    def _context(self, directory: Path, spiffe_id: str) -> ssl.SSLContext:
        own = self.ca.issue(spiffe_id)
        directory.mkdir(parents=True, exist_ok=True)
        chain, key = directory / "broker-chain.pem", directory / "broker-key.pem"
        chain.write_bytes(own.cert_chain_pem)
        key.write_bytes(own.private_key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(chain, key)
        context.load_verify_locations(cadata=self.ca.bundle_pem.decode("ascii"))
        context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["h2"])
        return context

    def set_svids(
        self,
        pod: str,
        svids: Iterable[MintedSvid],
        *,
        bundle_pem: bytes | None = None,
        federated: Mapping[str, bytes] | None = None,
    ) -> None:
        """Issue `svids` to `pod` (the first is its default), sent with `bundle_pem` (default: the CA's) and the
        `federated` bundles (PEM by `spiffe://<td>`; default none) its SPIRE entry would grant; its open streams
        get a new message."""
        workload = self._workloads.setdefault(pod, _Workload())
        workload.svids, workload.revoked = tuple(svids), False
        workload.bundle_pem, workload.federated = bundle_pem, dict(federated or {})
        workload.version += 1
        self._changed.set(self._changed.value + 1)

    def revoke(self, pod: str) -> None:
        """Take `pod`'s entitlement away: its streams end with PermissionDenied, later calls get it too."""
        workload = self._workloads.setdefault(pod, _Workload())
        workload.revoked = True
        workload.version += 1
        self._changed.set(self._changed.value + 1)

    def service(self) -> purerpc.Service:
        service = purerpc.Service("spiffe.broker.API")
        service.add_method(
            "SubscribeToX509SVID",
            self._subscribe,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_STREAM,
                broker_pb2.SubscribeToX509SVIDRequest,
                broker_pb2.SubscribeToX509SVIDResponse,
            ),
        )
        return service

    def _resolve(self, message: broker_pb2.SubscribeToX509SVIDRequest) -> tuple[str, str]:
        reference = message.reference.reference
        kube, pid = broker_pb2.KubernetesObjectReference(), broker_pb2.WorkloadPIDReference()
        if reference.Is(kube.DESCRIPTOR) and "kubernetes" in self.references:
            reference.Unpack(kube)
            if (kube.type.plural, kube.type.group) != ("pods", "core") or not kube.key.name:
                raise purerpc.InvalidArgumentError(
                    "WORKLOAD_REFERENCE_INVALID: only pods by namespace and name"
                )
            return "kubernetes", f"{kube.key.namespace}/{kube.key.name}"
        if reference.Is(pid.DESCRIPTOR) and "pid" in self.references:
            reference.Unpack(pid)
            if pid.pid <= 0:
                raise purerpc.InvalidArgumentError(f"WORKLOAD_REFERENCE_INVALID: pid {pid.pid}")
            pod = self.pids.get(pid.pid)
            if pod is None:
                raise purerpc.NotFoundError(f"WORKLOAD_NOT_FOUND: pid {pid.pid}")
            return "pid", pod
        raise purerpc.InvalidArgumentError(
            f"WORKLOAD_REFERENCE_INVALID: reference type {reference.type_url!r} is not understood"
        )

    async def _subscribe(
        self, message: broker_pb2.SubscribeToX509SVIDRequest, request: Any
    ) -> AsyncIterator[broker_pb2.SubscribeToX509SVIDResponse]:
        certificate = current_peer_certificate()
        caller = "" if certificate is None else certificate_spiffe_id(certificate)
        self.callers.append(caller)
        _require_header(request, ("broker.spiffe.io", "true"))
        kind, pod = self._resolve(message)
        self.calls.append((kind, pod))
        if self.unattestable.get(pod, 0) > 0:
            self.unattestable[pod] -= 1
            raise purerpc.FailedPreconditionError(
                f"WORKLOAD_REFERENCE_ERROR: pod {pod} cannot be attested yet"
            )
        self.open_streams.set(self.open_streams.value + 1)
        try:
            seen = -1
            while True:
                workload = self._workloads.get(pod)
                if workload is None:
                    raise purerpc.NotFoundError(f"WORKLOAD_NOT_FOUND: pod {pod}")
                if workload.revoked or not workload.svids:
                    raise purerpc.PermissionDeniedError(f"WORKLOAD_NOT_ENTITLED: pod {pod}")
                if workload.version != seen:
                    seen = workload.version
                    bundle = self.ca.bundle_pem if workload.bundle_pem is None else workload.bundle_pem
                    yield broker_pb2.SubscribeToX509SVIDResponse(
                        svids=[
                            broker_pb2.X509SVID(**svid_message(svid, bundle_pem=bundle))
                            for svid in workload.svids
                        ],
                        federated_bundles={
                            key: _der_certificates(pem) for key, pem in sorted(workload.federated.items())
                        },
                    )
                await self._changed.wait_value(functools.partial(self._moved, pod, workload, seen))
        finally:
            self.open_streams.set(self.open_streams.value - 1)

    async def serve(
        self, socket: Path, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve on the Unix socket `socket` until cancelled or `stop`ped."""
        self._stopped = trio.Event()
        with trio.CancelScope() as self._scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    functools.partial(
                        serve_grpc, [self.service()], listen=ListenAddress.unix(socket), tls=self._tls
                    )
                )
                task_status.started()
        self._stopped.set()

    async def stop(self) -> None:
        """Go down: the listener closes and every open stream breaks; returns once the socket is gone."""
        if self._scope is not None:
            self._scope.cancel()
            await self._stopped.wait()
