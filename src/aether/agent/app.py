"""`aether agent`: one node's control plane — the plane (`aether.plane.open_plane`: journal, node projection, xDS
server, SVID files, admin socket) plus the node's own sources and sinks: the CNI service, the registrar watch and
registrations, the Kubernetes source, the mesh-dns record file and the pods' UDP capture sets.

The root of the agent's task tree (STYLE C1): every task below is started here or in the plane, and ends with it.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from aether.agent.mesh_records import serve_mesh_records
from aether.agent.pod_lookup import StatePodLookup
from aether.agent.registration import Registrations, serve_registrations
from aether.cni.plugin_server import PluginServer
from aether.cni.server import ACK_WAIT, CniServer, PodLookup
from aether.cni.udp_services import UdpServicesWriter, serve_udp_services
from aether.core.events import NodeCaptureConfigured
from aether.core.project.node import NodeProjector
from aether.core.snapshot import Snapshot
from aether.core.state import State
from aether.envoy.bootstrap import OTEL_CLUSTER
from aether.identity.broker import BrokerClient
from aether.identity.renewal import RenewingContext, serve_context_renewal
from aether.identity.status import IDENTITY_DOCUMENT, identity_document
from aether.identity.workload_api import WorkloadIdentity, serve_workload_api
from aether.kube import KubeClient
from aether.kube.mesh_config_file import serve_mesh_config_file
from aether.kube.source import MESH_QUERIES, known_objects, node_pod_query, serve_kube_source
from aether.plane.admin import HasStatistics
from aether.plane.admin_client import DEFAULT_ADMIN_SOCKET
from aether.plane.journal import Journal
from aether.plane.plane import DEFAULT_XDS_SOCKET, open_plane
from aether.registrar.client import WatchScope, serve_registrar_client
from aether.rpc.listen import ListenAddress
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer


@attrs.frozen(kw_only=True)
class AgentConfig:
    """What one agent serves and where."""

    node_name: str
    """The Kubernetes node name; also the node id Envoy must present."""
    log_dir: Path
    """The node's event log (created if missing)."""
    standby: bool = False
    """When another process owns the log: build the snapshot from its log and take over (sources, sockets) the moment
    it exits; False: refuse to start (`aether.log.LogLockedError` names the owner's pid)."""
    xds: ListenAddress = ListenAddress.unix(DEFAULT_XDS_SOCKET)
    admin_socket: Path = DEFAULT_ADMIN_SOCKET
    svid_dir: Path | None = None
    """A directory of SVID files (see `aether.identity.files`); None: identities come from elsewhere."""
    registrar: ListenAddress | None = None
    """The registrar to watch (filtered to the node's dependency set) and to register the node's pods with;
    None: registry events come from elsewhere and nothing is registered."""
    cluster_name: str = "local"
    registrar_tls: ssl.SSLContext | None = None
    """mTLS to the registrar with this agent's node identity (`aether.rpc.tls.client_tls_context`): where the
    registrar authorizes, it accepts only this node's endpoints from it. None: plaintext (a Unix socket, tests)."""
    cni_socket: Path | None = None
    """Serve the CNI service (`aether-cni` registers pods) on this Unix socket; None: pods come from elsewhere."""
    cni_plugin_socket: Path | None = None
    """Run the host's Python-free `aether-cni` executable's commands, forwarded on this Unix socket
    (`aether.cni.plugin_server`): the agent programs the pods' namespaces (root, CAP_NET_ADMIN, CAP_SYS_ADMIN).
    Needs `cni_socket` (the CNI service it calls in-process); None: no executable is served."""
    cni_pods: PodLookup | None = None
    """The pod metadata the CNI service decides with (labels, service account); None: the pods of the agent's
    own log (`aether.agent.pod_lookup.StatePodLookup`), and what the plugin sends for a pod the log lacks."""
    kube: KubeClient | None = None
    """Watch this Kubernetes API for Services, Gateway API objects, ReferenceGrants and the node's pods
    (`aether.kube.source`); None: those come from elsewhere."""
    cni_ack_wait: float = ACK_WAIT
    """Seconds AddPod waits for the proxy's ACK of a new pod's listeners."""
    dns_records: Path | None = None
    """Keep the mesh-dns record file here; None: no record file."""
    mesh_config: Path | None = None
    """Read the projected MeshConfig file (`aether.kube.mesh_config_file`); None: the mesh settings come from
    elsewhere (or stay the defaults)."""
    envoy_traces: bool = False
    """Envoy's bootstrap declares the collector's cluster (`aether.envoy.bootstrap.OTEL_CLUSTER`): the pods'
    HTTP listeners trace there when the MeshConfig enables tracing."""
    spiffe_workload_socket: Path | None = None
    """Take the agent's own SVID and the trust bundles from the SPIFFE Workload API at this Unix socket
    (`aether.identity.workload_api`); without a broker, the SVIDs it streams are the pods' too."""
    registrar_spiffe: bool = False
    """mTLS to the registrar with the Workload API's SVID (needs `spiffe_workload_socket`; `registrar_tls` unset):
    each rotation of the SVID or the bundle builds a fresh context for every later connection, and a bundle that
    drops a CA makes the open registrar connections redial (`aether.identity.renewal`)."""
    spiffe_broker_socket: Path | None = None
    """Broker every pod's SVID from the SPIFFE Broker API at this Unix socket (`aether.identity.broker`), over
    mTLS with the agent's own SVID: needs `spiffe_workload_socket`."""


@attrs.frozen(kw_only=True)
class RunningAgent:
    """Handles on a running agent, for tests and the demo."""

    journal: Journal
    cache: SnapshotCache
    server: XdsServer
    projector: NodeProjector
    xds: ListenAddress
    """Where xDS is served (the real port when port 0 was asked)."""
    registrations: Registrations | None = None
    """The sink registering the node's pods (None without a registrar)."""
    cni: CniServer | None = None
    """The CNI service (None without a CNI socket)."""
    cni_plugin: PluginServer | None = None
    """The host executable's server (None without a CNI plugin socket)."""
    udp_services: UdpServicesWriter | None = None
    """The sink keeping each captured pod's set of served UDP destinations (None without a CNI socket)."""
    workload_identity: WorkloadIdentity | None = None
    """The agent's own identity from the Workload API (None without a Workload API socket)."""
    broker: BrokerClient | None = None
    """The Broker API client (None without a broker socket)."""


async def _record_capture(journal: Journal, *, node_name: str, captured: bool) -> None:
    """Append `NodeCaptureConfigured` when the log's state disagrees with this start's configuration.

    Sent before any source starts, so it folds before anything they observe: a pod the pod watch reports ahead
    of its CNI ADD is never projected outside its network namespace.
    """
    if (node_name in journal.state.captured_nodes) == captured:
        return
    event = NodeCaptureConfigured(
        observed_at=time.time_ns(), source="agent", node_name=node_name, captured=captured
    )
    async with journal.sender() as send:
        await send.send(event)


async def serve_agent(
    config: AgentConfig, *, task_status: trio.TaskStatus[RunningAgent] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the agent until cancelled; `task_status.started` receives its handles once Envoy can connect.

    Start-up replays the log first, so the first snapshot served is the one served before a restart.
    """
    projector = NodeProjector(
        node_name=config.node_name, collector_cluster=OTEL_CLUSTER if config.envoy_traces else ""
    )
    scope = WatchScope()

    def project(state: State, now: int) -> Snapshot:
        snapshot = projector.project(state, now=now)
        scope.update(projector.dependencies)  # the watch follows the dependency set (a fresh resync)
        return snapshot

    async with (
        open_plane(
            config.log_dir, project=project, svid_dir=config.svid_dir, standby=config.standby
        ) as plane,
        trio.open_nursery() as nursery,
    ):
        journal, cache = plane.journal, plane.cache
        await _record_capture(journal, node_name=config.node_name, captured=config.cni_socket is not None)
        workload_identity, broker = await _start_spiffe(config, journal, nursery)
        registrar_tls = config.registrar_tls
        reconnects: list[Callable[[], None]] = []
        """What must redial when the registrar TLS context's bundle drops a CA."""

        def reconnect_all() -> None:
            for reconnect in reconnects:
                reconnect()

        if config.registrar_spiffe:
            if workload_identity is None:
                raise ValueError("registrar_spiffe needs the Workload API socket (the agent's own SVID)")
            registrar_tls = RenewingContext()
            nursery.start_soon(
                functools.partial(
                    serve_context_renewal,
                    workload_identity,
                    registrar_tls,
                    on_narrowed=reconnect_all,
                )
            )
        registrations: Registrations | None = None
        if config.registrar is not None:
            client = await nursery.start(
                functools.partial(
                    serve_registrar_client,
                    target=config.registrar,
                    cluster_name=config.cluster_name,
                    node_name=config.node_name,
                    services=scope,
                    send=journal.sender(),
                    tls=registrar_tls,
                )
            )
            scope.attach(client)
            reconnects.append(client.reconnect)
            registrations = await nursery.start(
                functools.partial(
                    serve_registrations,
                    target=config.registrar,
                    node_name=config.node_name,
                    cluster_name=config.cluster_name,
                    tls=registrar_tls,
                )
            )
            journal.subscribe(registrations.update)
            reconnects.append(registrations.reconnect)
        if config.dns_records is not None:
            await nursery.start(functools.partial(serve_mesh_records, config.dns_records, journal=journal))
        cni: CniServer | None = None
        cni_plugin: PluginServer | None = None
        udp_services: UdpServicesWriter | None = None
        if config.cni_socket is not None:
            lookup = config.cni_pods
            if lookup is None:
                own = StatePodLookup(authoritative=config.kube is not None)
                journal.subscribe(own.follow)
                lookup = own
            cni = CniServer(
                journal=journal,
                cache=cache,
                node_name=config.node_name,
                pods=lookup,
                ack_wait=config.cni_ack_wait,
            )
            await nursery.start(functools.partial(cni.serve, socket=config.cni_socket))
            if config.cni_plugin_socket is not None:
                cni_plugin = PluginServer(cni=cni, socket=config.cni_plugin_socket)
                await nursery.start(cni_plugin.serve)
            udp_services = await nursery.start(
                functools.partial(
                    serve_udp_services,
                    journal=journal,
                    cache=cache,
                    node_name=config.node_name,
                    captures=lambda: projector.udp_capture,
                )
            )
        if config.mesh_config is not None:
            await nursery.start(
                functools.partial(
                    serve_mesh_config_file,
                    config.mesh_config,
                    send=journal.sender(),
                    current=lambda: journal.state.kube.mesh_config,
                )
            )
        if config.kube is not None:
            queries = (*MESH_QUERIES, node_pod_query(config.node_name))
            await nursery.start(
                functools.partial(
                    serve_kube_source,
                    config.kube,
                    journal.sender(),
                    queries=queries,
                    known=known_objects(journal.state, queries=queries),
                )
            )
        parts: dict[str, HasStatistics] = {"projector": projector}
        if workload_identity is not None:
            parts["workload_api"] = workload_identity
        if broker is not None:
            parts["broker"] = broker
        documents = {
            IDENTITY_DOCUMENT: lambda: identity_document(
                journal.state, now=time.time_ns(), broker=() if broker is None else broker.pods()
            )
        }
        bound = await nursery.start(
            functools.partial(
                plane.serve,
                xds=config.xds,
                admin_socket=config.admin_socket,
                parts=parts,
                documents=documents,
            )
        )
        task_status.started(
            RunningAgent(
                journal=journal,
                cache=cache,
                server=plane.server,
                projector=projector,
                xds=bound,
                registrations=registrations,
                cni=cni,
                cni_plugin=cni_plugin,
                udp_services=udp_services,
                workload_identity=workload_identity,
                broker=broker,
            )
        )


async def _start_spiffe(
    config: AgentConfig, journal: Journal, nursery: trio.Nursery
) -> tuple[WorkloadIdentity | None, BrokerClient | None]:
    """Start the SPIFFE clients the configuration asks for (the Workload API first: the broker needs its SVID)."""
    if config.spiffe_workload_socket is None:
        if config.spiffe_broker_socket is not None:
            raise ValueError(
                "a SPIFFE broker socket needs the Workload API socket too (the agent's own SVID)"
            )
        return None, None
    identity: WorkloadIdentity = await nursery.start(
        functools.partial(
            serve_workload_api,
            config.spiffe_workload_socket,
            send=journal.sender(),
            publish_svids=config.spiffe_broker_socket is None,
        )
    )
    if config.spiffe_broker_socket is None:
        return identity, None
    broker = BrokerClient(socket=config.spiffe_broker_socket, identity=identity, send=journal.sender())
    journal.subscribe(broker.follow)
    nursery.start_soon(broker.serve)
    return identity, broker
