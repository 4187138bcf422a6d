"""`aether edge`: the edge's control plane — the plane (`aether.plane.open_plane`) with the edge projection.

The agent minus CNI and local pods (DESIGN.md section 2): one identity, the Gateways of the edge's class. Its
objects come from one of two sources, and its endpoints from the registrar or the manifests' pods:

* in a cluster, the Kubernetes API (`aether.kube.source` with `aether.kube.access.EDGE_QUERIES`: GatewayClasses,
  Gateways, the five route kinds, Services, ReferenceGrants, Namespaces, TLS Secrets) and the registrar
  (`aether.registrar.client`, its watch scoped to the mesh services the edge's backends resolve to, refiltered
  when they change, as the agent's is to its dependency set);
* for local runs, a manifest directory: its objects, and (without a registrar) its pods standing in for the
  registry.

Both sources own the same kinds (each deletes from the log what it no longer lists), so they are alternatives,
never combined. Either may go away: the log keeps what it last said, so the edge serves its last snapshot until it
returns. Each replica is its own control plane with its own log: no leader, no writes to the API.

    API or manifests, registrar, SVIDs ──events──▶ journal ──state──▶ EdgeProjector ──snapshot──▶ cache ──▶ xDS ──▶ Envoy
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import trio

from aether.core.gateway import GatewayProjector
from aether.core.mesh_names import parse_cluster_name
from aether.core.project.edge import DEFAULT_EDGE_SERVICE, EdgeOptions
from aether.core.project.edge_projector import EdgeProjector
from aether.core.project.names import ANY_ADDRESS
from aether.core.snapshot import Snapshot
from aether.core.state import State
from aether.envoy.bootstrap import OTEL_CLUSTER, SPIRE_SDS_CLUSTER
from aether.identity.workload_api import serve_workload_api
from aether.kube.access import EDGE_QUERIES
from aether.kube.api import KubeClient
from aether.kube.directory import ManifestSource, serve_manifest_directory
from aether.kube.mesh_config_file import MeshConfigFileSource, serve_mesh_config_file
from aether.kube.source import KubeSourceStatistics, known_objects, serve_kube_source
from aether.plane.admin import HasStatistics
from aether.plane.journal import Journal
from aether.plane.plane import DEFAULT_XDS_SOCKET, open_plane
from aether.registrar.client import RegistrarClient, WatchScope, serve_registrar_client
from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff
from aether.rpc.listen import ListenAddress
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer

__all__ = ["DEFAULT_EDGE_ADMIN_SOCKET", "EdgeConfig", "RunningEdge", "backend_services", "serve_edge"]

DEFAULT_EDGE_ADMIN_SOCKET = Path("/run/aether/edge-admin.sock")
"""The edge's admin socket (`aether status` reads it)."""


@attrs.frozen(kw_only=True)
class EdgeConfig:
    """What one edge serves and where."""

    pod_name: str
    """The edge pod's name: the node id its Envoy must present."""
    log_dir: Path
    """The edge's event log (created if missing)."""
    standby: bool = False
    """When another process owns the log: build the snapshot from its log and take over (sources, sockets) the moment
    it exits; False: refuse to start (`aether.log.LogLockedError` names the owner's pid)."""
    manifests: Path | None = None
    """The manifest directory: Gateway API objects, Services, TLS Secrets and (without `registrar`) the pods
    behind the backends. Exactly one of `manifests` and `kube` is given."""
    kube: KubeClient | None = None
    """Watch this Kubernetes API for the objects (`aether.kube.access.EDGE_QUERIES`); needs `registrar`."""
    registrar: ListenAddress | None = None
    """Watch the registrar for the endpoints of the backends' mesh services; None: the manifests' pods."""
    registrar_tls: ssl.SSLContext | None = None
    """mTLS to the registrar (`aether.rpc.tls.client_tls_context`); None: plaintext (a Unix socket, tests)."""
    cluster_name: str = "local"
    """Sent with the registrar watch (with `pod_name`, names this replica's watch on the registrar)."""
    backoff: Backoff = DEFAULT_BACKOFF
    """Waits between failed lists, watches and registrar connections (short ones in tests)."""
    xds: ListenAddress = ListenAddress.unix(DEFAULT_XDS_SOCKET)
    admin_socket: Path = DEFAULT_EDGE_ADMIN_SOCKET
    svid_dir: Path | None = None
    """A directory of SVID files holding the edge's SVID and the bundle; None: identities come from elsewhere."""
    service: str = DEFAULT_EDGE_SERVICE
    """The edge's own mesh service `<ns>/<sa>`: whose SVID it presents to backends."""
    bind: str = ANY_ADDRESS
    """Where Gateway listener ports and the readiness port bind."""
    cleartext: bool = False
    """Identity none: dial backends in HTTP/2 without TLS."""
    spiffe_workload_socket: Path | None = None
    """Take the edge's SVID and the bundles from the SPIFFE Workload API at this Unix socket into the log (the
    edge serves them over ADS, checked like every SVID); None: from `svid_dir`, or from Envoy's own SDS."""
    spire_sds: bool = False
    """Identity spire: Envoy takes the edge's SVID and bundle over SDS from the SPIRE agent's socket itself (its
    bootstrap declares it: `aether bootstrap --spiffe-workload-socket PATH`); the edge serves no secret."""
    manifest_poll_interval: float = 1.0
    mesh_config: Path | None = None
    """Read the projected MeshConfig file (`aether.kube.mesh_config_file`); None: the defaults."""
    envoy_traces: bool = False
    """Envoy's bootstrap declares the collector's cluster (`aether.envoy.bootstrap.OTEL_CLUSTER`): trace there
    when the MeshConfig enables tracing."""


@attrs.frozen(kw_only=True)
class RunningEdge:
    """Handles on a running edge, for tests and the demo."""

    journal: Journal
    cache: SnapshotCache
    server: XdsServer
    xds: ListenAddress
    """Where xDS is served (the real port when port 0 was asked)."""
    manifests: ManifestSource | None = None
    """The manifest directory's source (None without `EdgeConfig.manifests`)."""
    kube: Callable[[], KubeSourceStatistics] | None = None
    """The Kubernetes source's counters (None without `EdgeConfig.kube`)."""
    registrar: RegistrarClient | None = None
    """The registrar watch (None without `EdgeConfig.registrar`)."""
    scope: WatchScope | None = None
    """The mesh services the registrar watch is scoped to (None without `EdgeConfig.registrar`)."""
    mesh_config: MeshConfigFileSource | None = None
    """The projected MeshConfig file's source (None without `EdgeConfig.mesh_config`)."""


@attrs.frozen
class _Counters:
    """A part whose counters are a function (the Kubernetes source's), for the admin socket's `/statistics`."""

    read: Callable[[], Any]

    def statistics(self) -> Any:
        return self.read()


def backend_services(clusters: Iterable[str], *, mesh_domain: str) -> frozenset[str]:
    """The mesh services (`<ns>/<sa>`) of the backend clusters the edge's routes name: its registrar watch's scope.

    A name that is no mesh service's cluster under `mesh_domain` (the unroutable cluster) contributes nothing.
    """
    parsed = (parse_cluster_name(name, mesh_domain=mesh_domain) for name in clusters)
    return frozenset(name.service for name in parsed if name is not None)


def _check(config: EdgeConfig) -> None:
    if (config.manifests is None) == (config.kube is None):
        raise ValueError(
            "the edge reads its objects from a manifest directory or from the Kubernetes API: give exactly one"
            " (both own the same kinds, so each would delete what the other listed)"
        )
    if config.kube is not None and config.registrar is None:
        raise ValueError(
            "an edge watching the Kubernetes API needs a registrar: it watches no pods, so its backends'"
            " endpoints come from the registrar's WatchEndpoints"
        )


async def serve_edge(
    config: EdgeConfig, *, task_status: trio.TaskStatus[RunningEdge] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the edge until cancelled; `task_status.started` receives its handles once Envoy can connect.

    Start-up replays the log first (the snapshot served before a restart is served again), then starts the
    sources: the manifests or the API (whose first list appends only what changed while the edge was down), the
    registrar watch, the SVIDs. A source that cannot be reached is retried with backoff; the log's last state is
    served meanwhile.

    Raises:
        ValueError: Not exactly one of `manifests` and `kube`, or `kube` without `registrar`.
        aether.kube.ManifestError: The manifests could not be read at start-up.
    """
    _check(config)
    options = EdgeOptions(
        bind=config.bind,
        service=config.service,
        cleartext=config.cleartext,
        spire_sds_cluster=SPIRE_SDS_CLUSTER if config.spire_sds else "",
        collector_cluster=OTEL_CLUSTER if config.envoy_traces else "",
    )

    scope = WatchScope()
    # One projector for the edge's life: a route change re-parses and re-resolves that route only, and its view
    # equals `gateway_view(state)` for any sequence of states (property_tests/test_gateway_incremental.py).
    gateways = GatewayProjector()
    # And one edge projector: a route change re-serializes that route's virtual host entry and its table only, and
    # its snapshot equals `edge_snapshot(view, state)` for any sequence of states
    # (property_tests/test_edge_incremental.py).
    edge = EdgeProjector(node_id=config.pod_name, options=options)

    def project(state: State, now: int) -> Snapshot:
        del now  # the edge has no on-demand requests to expire
        view = gateways.view(state)
        scope.update(backend_services(view.backend_clusters, mesh_domain=state.kube.mesh_config.mesh_domain))
        return edge.project(view, state)

    async with (
        open_plane(
            config.log_dir, project=project, svid_dir=config.svid_dir, standby=config.standby
        ) as plane,
        trio.open_nursery() as nursery,
    ):
        journal = plane.journal
        parts: dict[str, HasStatistics] = {}
        registrar: RegistrarClient | None = None
        if config.registrar is not None:
            registrar = await nursery.start(
                functools.partial(
                    serve_registrar_client,
                    target=config.registrar,
                    cluster_name=config.cluster_name,
                    node_name=config.pod_name,
                    services=scope,
                    send=journal.sender(),
                    tls=config.registrar_tls,
                    backoff=config.backoff,
                )
            )
            scope.attach(registrar)
            parts["registrar"] = registrar
        manifests: ManifestSource | None = None
        if config.manifests is not None:
            manifests = await nursery.start(
                functools.partial(
                    serve_manifest_directory,
                    config.manifests,
                    send=journal.sender(),
                    poll_interval=config.manifest_poll_interval,
                    offline_registry=config.registrar is None,
                    logged=journal.state,  # the replayed state: a restart appends only what changed meanwhile
                )
            )
            parts["manifests"] = manifests
        kube: Callable[[], KubeSourceStatistics] | None = None
        if config.kube is not None:
            kube = await nursery.start(
                functools.partial(
                    serve_kube_source,
                    config.kube,
                    journal.sender(),
                    queries=EDGE_QUERIES,
                    known=known_objects(journal.state, queries=EDGE_QUERIES),
                    backoff=config.backoff,
                )
            )
            parts["kubernetes"] = _Counters(kube)
        mesh_config: MeshConfigFileSource | None = None
        if config.mesh_config is not None:
            mesh_config = await nursery.start(
                functools.partial(
                    serve_mesh_config_file,
                    config.mesh_config,
                    send=journal.sender(),
                    current=lambda: journal.state.kube.mesh_config,
                )
            )
        if config.spiffe_workload_socket is not None:
            parts["workload_api"] = await nursery.start(
                functools.partial(
                    serve_workload_api,
                    config.spiffe_workload_socket,
                    send=journal.sender(),
                    publish_svids=True,
                )
            )
        bound = await nursery.start(
            functools.partial(plane.serve, xds=config.xds, admin_socket=config.admin_socket, parts=parts)
        )
        task_status.started(
            RunningEdge(
                journal=journal,
                cache=plane.cache,
                server=plane.server,
                xds=bound,
                manifests=manifests,
                kube=kube,
                registrar=registrar,
                scope=scope if registrar is not None else None,
                mesh_config=mesh_config,
            )
        )
