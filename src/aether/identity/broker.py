"""A SPIFFE Broker API client: the agent brokers an X.509-SVID for every managed pod on its node from the SPIFFE
implementation's Broker Endpoint (SPIRE's broker socket), and sends it to the journal as it rotates.

One mutual-TLS connection over the endpoint's Unix socket, with the agent's own SVID from the Workload API
(`aether.identity.workload_api`); on it, one `SubscribeToX509SVID` stream per pod, each with the
`broker.spiffe.io: true` header. The pods are the journal's (`BrokerClient.follow` is a journal subscriber); each
stream references its pod as the server allows:

- a `KubernetesObjectReference` to the pod (`pods` of group `core`, its namespace and name, and its UID when
  known), which lets the server attest the pod itself;
- a `WorkloadPIDReference`: a process in the pod's network namespace (the netns path the CNI reported), when the
  server answers the Kubernetes reference with InvalidArgument (the spec's answer to a reference type it does not
  understand) or the pod has no name to reference. The server is then remembered to want PIDs.

Each response holds the pod's full set of SVIDs; the one for the pod's SPIFFE ID
`spiffe://<trustDomain>/ns/<ns>/sa/<sa>` (else the default, the first, which the checks then refuse) becomes a
`SvidRotated` of that SPIFFE ID, checked by `aether.identity.x509.check_svid` against the node's trust bundle of the
mesh's trust domain (the Workload API's). Pods of one service account share their SPIFFE ID, and so their SDS
secret: the SVID sent is the one most recently received among the pods that hold one.

When a pod leaves, its stream is cancelled and what it received is dropped (the spec's workload lifecycle rule);
when no pod of its service account holds an SVID any more, `SvidRemoved` follows, and when the server answers
PermissionDenied (the workload is not entitled) the pod's material is dropped likewise. NotFound (the server does
not see the pod yet), FailedPrecondition and Unavailable are retried for that pod alone after a backoff. A broken
connection ends every stream and is redialled after a backoff (`SPIFFE_BACKOFF`, capped at 5 s); what was sent
stays in force meanwhile, so Envoy keeps serving the last good SVIDs, and each is re-sent when its `not_after` passes
(`aether.identity.recheck`). When the node's bundles change, every held SVID is judged again, and a bundle that
dropped a CA the connection was verified with makes the client redial at once.

The Broker API's per-workload bundles are compared with the node's and reported, not served
(`aether.identity.workload_bundles` says why): the node's Envoy trusts one bundle per trust domain, the Workload
API's, and each SVID is judged against it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import operator
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import purerpc
import trio
from google.protobuf import any_pb2
from purerpc.grpc_proto import GRPCProtoSocket

from aether.core.events import Event, Pod, SvidRemoved, SvidRotated
from aether.core.state import State
from aether.identity.files import spiffe_id_of
from aether.identity.recheck import Rechecks
from aether.identity.streams import BROKER_HEADER, SPIFFE_BACKOFF, server_stream
from aether.identity.tls import client_context, peer_spiffe_id
from aether.identity.workload_api import WorkloadIdentity
from aether.identity.workload_bundles import bundle_disagreement, bundle_narrowed
from aether.identity.x509 import not_before_of_chain, report_http3, svid_from_der, trust_domain_of_id
from aether.proto.spiffe.v1 import broker_pb2
from aether.rpc.backoff import Backoff
from aether.rpc.calls import CONNECTION_ERRORS, open_grpc_socket
from aether.rpc.compat import apply_purerpc_fixes
from aether.rpc.listen import ListenAddress
from aether.sync import LatestValue, first_leaf

__all__ = [
    "BROKER_SOCKET_ENV",
    "SERVICE_NAME",
    "SOURCE",
    "BrokerClient",
    "BrokerStatistics",
    "PodIdentity",
    "process_in_netns",
]

LOG = logging.getLogger("aether.identity.broker")

SERVICE_NAME = "spiffe.broker.API"
BROKER_SOCKET_ENV = "SPIFFE_BROKER_SOCKET"
"""The environment variable the Broker Endpoint spec locates the endpoint with."""
SOURCE = "spiffe-broker-api"
"""The `source` of the events this client sends."""

_RETRIED = (
    purerpc.NotFoundError,
    purerpc.FailedPreconditionError,
    purerpc.UnavailableError,
    purerpc.PermissionDeniedError,
    purerpc.InvalidArgumentError,
)


@attrs.frozen(kw_only=True)
class PodIdentity:
    """Where one pod's SVID stands, for `/identity` and `aether identity-ready`."""

    pod: str
    """`<namespace>/<name>`."""
    spiffe_id: str
    reference: str
    """The reference type of the last request: 'kubernetes', 'pid' or '' (none sent yet)."""
    received: bool
    """The pod holds an SVID from the broker."""
    last_error: str
    federated: tuple[str, ...] = ()
    """The trust domains of the federated bundles the broker gave the pod (its SPIRE entry's), sorted."""
    bundle_disagreement: str = ""
    """How the broker's bundles for the pod differ from the node's ('' when they agree; see
    `aether.identity.workload_bundles.bundle_disagreement`)."""


@attrs.frozen(kw_only=True)
class BrokerStatistics:
    """Counters of the Broker API client."""

    connects: int
    failures: int
    """Connections that failed (each followed by a backoff)."""
    pod_failures: int
    """Pod streams that ended with a status (each retried after that pod's backoff)."""
    pods: int
    messages: int
    events_sent: int
    wants_pid: bool
    """The server refused Kubernetes references: pods are referenced by PID."""
    last_error: str
    longest_wait: float
    """The longest wait in seconds before a redial so far (at most the backoff's cap)."""


@attrs.define
class _PodStream:
    pod: Pod
    spiffe_id: str
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    reference: str = ""
    svid: broker_pb2.X509SVID | None = None
    received_at: int = 0
    last_error: str = ""
    federated: tuple[str, ...] = ()
    disagreement: str = ""


class BrokerClient:
    """Brokers the SVIDs of the node's pods; see the module docstring. Run `serve`; subscribe `follow`."""

    def __init__(
        self,
        *,
        socket: Path,
        identity: WorkloadIdentity,
        send: trio.MemorySendChannel[Event],
        trust_domain: str | None = None,
        server_id: str | None = None,
        clock: Callable[[], int] = time.time_ns,
        backoff: Backoff = SPIFFE_BACKOFF,
        rng: random.Random | None = None,
    ) -> None:
        self._target = ListenAddress.unix(socket)
        self._identity = identity
        self._send = send
        self._trust_domain = trust_domain
        self._server_id = server_id
        self._mesh_trust_domain = ""
        self._clock = clock
        self._backoff = backoff
        self._rng = random.Random() if rng is None else rng
        self._wanted: LatestValue[dict[str, Pod]] = LatestValue({})
        """The pods to broker for, by key (`follow` replaces it)."""
        self._streams: dict[str, _PodStream] = {}
        self._sent: dict[str, bytes] = {}
        """The digest of what was last sent for each SPIFFE ID."""
        self.rechecks = Rechecks(clock=clock)
        self._wants_pid = False
        self._connects = self._failures = self._pod_failures = self._messages = self._events_sent = 0
        self._last_error = ""
        self._longest_wait = 0.0
        self._connection = trio.CancelScope()
        """The current connection's scope: cancelled to redial when the trust narrows."""
        self._dialled_bundle = b""
        """The bundle (PEM) the current connection verified the endpoint with."""

    @property
    def trust_domain(self) -> str:
        """The mesh's trust domain: the one given, else the MeshConfig's (what Envoy's secrets are named after)."""
        return self._trust_domain or self._mesh_trust_domain

    def follow(self, state: State, now: int) -> None:
        """Journal subscriber: the pods to broker SVIDs for are the managed pods of the state."""
        self._mesh_trust_domain = state.kube.mesh_config.trust_domain
        pods = {key: record.pod for key, record in state.pods.items()}
        if pods != self._wanted.value:
            self._wanted.set(pods)

    def statistics(self) -> BrokerStatistics:
        """Return the client's counters."""
        return BrokerStatistics(
            connects=self._connects,
            failures=self._failures,
            pod_failures=self._pod_failures,
            pods=len(self._streams),
            messages=self._messages,
            events_sent=self._events_sent,
            wants_pid=self._wants_pid,
            last_error=self._last_error,
            longest_wait=self._longest_wait,
        )

    def pods(self) -> list[PodIdentity]:
        """Where each pod's SVID stands, sorted by pod."""
        return [
            PodIdentity(
                pod=key,
                spiffe_id=stream.spiffe_id,
                reference=stream.reference,
                received=stream.svid is not None,
                last_error=stream.last_error,
                federated=stream.federated,
                bundle_disagreement=self._disagreement(stream),
            )
            for key, stream in sorted(self._streams.items())
        ]

    async def serve(self) -> None:
        """Broker until cancelled: wait for the agent's own SVID, then keep the connection, redialling on failure."""
        apply_purerpc_fixes()
        async with self._send, trio.open_nursery() as nursery:
            nursery.start_soon(self.rechecks.serve, self._recheck)
            nursery.start_soon(self._drop_departed)
            nursery.start_soon(self._follow_node_bundles)
            await self._identity.wait_ready()
            failures = 0
            while True:
                before = self._messages
                with trio.CancelScope() as self._connection:
                    try:
                        await self._run_connection()
                    except* CONNECTION_ERRORS as group:
                        error = first_leaf(group)
                        self._last_error = f"{type(error).__name__}: {error}"
                        LOG.warning("SPIFFE Broker API at %s failed: %r", self._target, error)
                if self._connection.cancelled_caught:
                    continue  # the node's bundle dropped a CA: redial at once, trusting only the new bundle
                self._failures += 1
                failures = 1 if self._messages > before else failures + 1
                wait = self._backoff.delay(failures, rng=self._rng)
                self._longest_wait = max(self._longest_wait, wait)
                await trio.sleep(wait)

    async def _run_connection(self) -> None:
        material = self._identity.tls_material()
        assert material is not None, "wait_ready() returned before the agent's SVID arrived"
        tls = client_context(material)
        self._dialled_bundle = material.bundle_pem
        async with open_grpc_socket(self._target, tls=tls) as grpc_socket, trio.open_nursery() as nursery:
            self._authenticate(peer_spiffe_id(grpc_socket))
            self._connects += 1
            running: dict[str, trio.CancelScope] = {}
            while True:
                wanted = self._wanted.value
                for key in sorted(running.keys() - wanted.keys()):
                    running.pop(key).cancel()  # `_drop_departed` drops its material
                for key in sorted(wanted.keys() - running.keys()):
                    running[key] = await nursery.start(self._pod_loop, grpc_socket, key, wanted[key])
                await self._wanted.wait_changed(wanted)

    def _authenticate(self, server: str) -> None:
        """Check the Broker Endpoint's SPIFFE ID (the spec requires the broker to): the one configured, else any
        of the mesh's trust domain (the chain was verified against its bundle by the handshake).

        Raises:
            BrokerAuthenticationError: It is another.
        """
        wanted = self._server_id
        if wanted is not None and server != wanted:
            raise BrokerAuthenticationError(f"the broker endpoint is {server!r}, not the expected {wanted!r}")
        if wanted is None and trust_domain_of_id(server) != self.trust_domain:
            raise BrokerAuthenticationError(
                f"the broker endpoint is {server!r}, not of the mesh's trust domain {self.trust_domain!r}"
            )

    async def _follow_node_bundles(self) -> None:
        """Until cancelled: when the node's bundles change, redial if the bundle the connection was verified with
        lost a CA (the connection rests on trust withdrawn; the SVIDs sent stay in force), and judge every held
        SVID again (an SVID of a CA the node's bundle lacked is served once it has it, not only at its next
        rotation; unchanged ones send nothing)."""
        seen = self._identity.material_version.value
        while True:
            seen = await self._identity.material_version.wait_value(functools.partial(operator.ne, seen))
            material = self._identity.tls_material()
            if material is not None and self._dialled_bundle:
                try:
                    narrowed = bundle_narrowed(self._dialled_bundle, material.bundle_pem)
                except ValueError:
                    narrowed = False  # a bundle that does not parse was refused when it arrived
                if narrowed:
                    LOG.info("broker: the bundle of %r dropped a CA: redialling", self._identity.trust_domain)
                    self._dialled_bundle = b""
                    self._connection.cancel()
            now = self._clock()
            for spiffe_id in sorted({stream.spiffe_id for stream in self._streams.values() if stream.svid}):
                await self._publish(spiffe_id, now=now)

    async def _drop_departed(self) -> None:
        """Until cancelled: close the stream of every pod that left and drop its material, connected or not."""
        while True:
            wanted = self._wanted.value
            for key in sorted(self._streams.keys() - wanted.keys()):
                self._streams[key].scope.cancel()
                await self._drop_pod(key)
            await self._wanted.wait_changed(wanted)

    async def _pod_loop(
        self,
        grpc_socket: GRPCProtoSocket,
        key: str,
        pod: Pod,
        *,
        task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        expected = spiffe_id_of(f"{pod.namespace}/{pod.service_account}", trust_domain=self.trust_domain)
        stream = self._streams.get(key)
        if stream is None or stream.pod != pod:
            stream = self._streams[key] = _PodStream(pod=pod, spiffe_id=expected)
        else:
            stream.scope = trio.CancelScope()
        task_status.started(stream.scope)
        failures = 0
        with stream.scope:
            while True:
                try:
                    await self._subscribe(grpc_socket, stream)
                except _RETRIED as error:
                    failures += 1
                    self._pod_failures += 1
                    stream.last_error = f"{type(error).__name__}: {error}"
                    LOG.warning("broker: pod %s: %s", key, stream.last_error)
                    if isinstance(error, purerpc.InvalidArgumentError) and stream.reference == "kubernetes":
                        self._wants_pid = True  # the server does not take Kubernetes references
                        failures = 0
                        continue
                    if isinstance(error, purerpc.PermissionDeniedError):
                        await self._forget_material(stream)
                except ReferenceUnavailableError as error:
                    failures += 1
                    stream.last_error = str(error)
                await trio.sleep(self._backoff.delay(failures, rng=self._rng))

    async def _subscribe(self, grpc_socket: GRPCProtoSocket, stream: _PodStream) -> None:
        reference, kind = self._reference(stream.pod)
        stream.reference = kind
        request = broker_pb2.SubscribeToX509SVIDRequest(reference=reference)
        async for message in server_stream(
            grpc_socket,
            service=SERVICE_NAME,
            method="SubscribeToX509SVID",
            request=request,
            response_type=broker_pb2.SubscribeToX509SVIDResponse,
            header=BROKER_HEADER,
            scheme="https",
        ):
            self._messages += 1
            if not message.svids:
                stream.last_error = "a response without any SVID was discarded"
                continue
            chosen = next(
                (svid for svid in message.svids if svid.spiffe_id == stream.spiffe_id), message.svids[0]
            )
            stream.svid, stream.received_at, stream.last_error = chosen, self._clock(), ""
            stream.federated = tuple(
                sorted(trust_domain_of_id(key) or key for key in message.federated_bundles)
            )
            disagreement = self._disagreement(stream)
            if disagreement and disagreement != stream.disagreement:
                LOG.warning("broker: pod %s: %s", stream.pod.key, disagreement)
            stream.disagreement = disagreement
            await self._publish(stream.spiffe_id, now=stream.received_at)

    def _disagreement(self, stream: _PodStream) -> str:
        """How the broker's bundles for `stream`'s pod differ from the node's, as of now ('' without an SVID)."""
        if stream.svid is None:
            return ""
        return bundle_disagreement(
            stream.svid.bundle,
            federated=stream.federated,
            trust_domain=self.trust_domain,
            node_bundles=self._identity.bundles_pem,
        )

    def _reference(self, pod: Pod) -> tuple[broker_pb2.WorkloadReference, str]:
        packed = any_pb2.Any()
        if not self._wants_pid and pod.name:
            kube = broker_pb2.KubernetesObjectReference(
                type=broker_pb2.KubernetesObjectType(plural="pods", group="core"),
                key=broker_pb2.KubernetesObjectKey(namespace=pod.namespace, name=pod.name),
                uid=pod.uid,
            )
            packed.Pack(kube)
            return broker_pb2.WorkloadReference(reference=packed), "kubernetes"
        pid = process_in_netns(pod.netns) if pod.netns else None
        if pid is None:
            raise ReferenceUnavailableError(
                f"pod {pod.namespace}/{pod.name}: no process found in its network namespace {pod.netns!r}"
                " to reference by PID (the server takes no Kubernetes references)"
            )
        packed.Pack(broker_pb2.WorkloadPIDReference(pid=pid))
        return broker_pb2.WorkloadReference(reference=packed), "pid"

    def _holder(self, spiffe_id: str) -> _PodStream | None:
        """The pod whose SVID `spiffe_id` is served with: the most recent to receive one."""
        holders = [
            stream for stream in self._streams.values() if stream.spiffe_id == spiffe_id and stream.svid
        ]
        return max(holders, key=lambda stream: (stream.received_at, stream.pod.key), default=None)

    async def _publish(self, spiffe_id: str, *, now: int, again: bool = False) -> None:
        holder = self._holder(spiffe_id)
        if holder is None or holder.svid is None:
            if self._sent.pop(spiffe_id, None) is not None:
                self.rechecks.forget(spiffe_id)
                await self._emit(SvidRemoved(observed_at=now, source=SOURCE, spiffe_id=spiffe_id))
            return
        message = holder.svid
        bundle = self._identity.bundles_pem.get(self.trust_domain, b"")
        svid = svid_from_der(
            message.x509_svid,
            message.x509_svid_key,
            spiffe_id=spiffe_id,
            bundle_pem=bundle,
            trust_domain=self.trust_domain,
            now=now,
        )
        digest = hashlib.sha256(
            b"\0".join((message.x509_svid, message.x509_svid_key, bundle, svid.problem.encode()))
        ).digest()
        if not again and self._sent.get(spiffe_id) == digest:
            return
        self._sent[spiffe_id] = digest
        self.rechecks.set(spiffe_id, (not_before_of_chain(message.x509_svid), svid.not_after))
        await self._emit(SvidRotated(observed_at=now, source=SOURCE, svid=report_http3(svid)))

    async def _recheck(self, spiffe_id: str, now: int) -> None:
        await self._publish(spiffe_id, now=now, again=True)

    async def _forget_material(self, stream: _PodStream) -> None:
        if stream.svid is not None:
            stream.svid = None
            await self._publish(stream.spiffe_id, now=self._clock())

    async def _drop_pod(self, key: str) -> None:
        stream = self._streams.pop(key, None)
        if stream is not None and stream.svid is not None:
            stream.svid = None
            await self._publish(stream.spiffe_id, now=self._clock())

    async def _emit(self, event: Event) -> None:
        await self._send.send(event)
        self._events_sent += 1


class BrokerAuthenticationError(ConnectionError):
    """The Broker Endpoint's certificate names another SPIFFE ID than the one expected (redialled after a backoff:
    a misdirected socket may be fixed while the agent runs)."""


class ReferenceUnavailableError(Exception):
    """The pod cannot be referenced yet (no process found in its network namespace)."""


def process_in_netns(netns: str, *, proc: Path = Path("/proc")) -> int | None:
    """Return a process in the network namespace at path `netns`: the lowest PID that is not a `pause` sandbox.

    None when the namespace does not exist or holds no process (blocking: a scan of `/proc`).
    """
    try:
        wanted = os.stat(netns)
    except OSError:
        return None
    found: list[tuple[bool, int]] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            here = os.stat(entry / "ns" / "net")
            if (here.st_dev, here.st_ino) != (wanted.st_dev, wanted.st_ino):
                continue
            command = (entry / "comm").read_text().strip()
        except OSError:
            continue
        found.append((command == "pause", int(entry.name)))
    return min(found)[1] if found else None
