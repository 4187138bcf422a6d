"""`aether edge`: the edge's control plane — the plane (`aether.plane.open_plane`) with the edge projection.

The agent minus CNI and local pods (DESIGN.md section 2): one identity, the Gateways of the edge's class. Its inputs
for now are a manifest directory (objects, and their pods standing in for the registry), SVID files and the
projected MeshConfig file.

    manifests, SVID files ──events──▶ journal (log + state) ──state──▶ project_edge ──snapshot──▶ cache ──▶ xDS ──▶ Envoy
"""

from __future__ import annotations

import functools
from pathlib import Path

import attrs
import trio

from aether.core.project.edge import DEFAULT_EDGE_SERVICE, EdgeOptions, project_edge
from aether.core.project.names import ANY_ADDRESS
from aether.core.snapshot import Snapshot
from aether.core.state import State
from aether.envoy.bootstrap import SPIRE_SDS_CLUSTER
from aether.identity.workload_api import serve_workload_api
from aether.kube.directory import ManifestSource, serve_manifest_directory
from aether.kube.mesh_config_file import MeshConfigFileSource, serve_mesh_config_file
from aether.plane.admin import HasStatistics
from aether.plane.journal import Journal
from aether.plane.plane import DEFAULT_XDS_SOCKET, open_plane
from aether.rpc.listen import ListenAddress
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer

__all__ = ["DEFAULT_EDGE_ADMIN_SOCKET", "EdgeConfig", "RunningEdge", "serve_edge"]

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
    manifests: Path
    """The manifest directory: Gateway API objects, Services, TLS Secrets and the pods behind the backends."""
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


@attrs.frozen(kw_only=True)
class RunningEdge:
    """Handles on a running edge, for tests and the demo."""

    journal: Journal
    cache: SnapshotCache
    server: XdsServer
    manifests: ManifestSource
    xds: ListenAddress
    """Where xDS is served (the real port when port 0 was asked)."""
    mesh_config: MeshConfigFileSource | None = None
    """The projected MeshConfig file's source (None without `EdgeConfig.mesh_config`)."""


async def serve_edge(
    config: EdgeConfig, *, task_status: trio.TaskStatus[RunningEdge] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the edge until cancelled; `task_status.started` receives its handles once Envoy can connect.

    Start-up replays the log first (the snapshot served before a restart is served again), then reads the
    manifests and the SVID files.
    """
    options = EdgeOptions(
        bind=config.bind,
        service=config.service,
        cleartext=config.cleartext,
        spire_sds_cluster=SPIRE_SDS_CLUSTER if config.spire_sds else "",
    )

    def project(state: State, now: int) -> Snapshot:
        del now  # the edge has no on-demand requests to expire
        return project_edge(state, node_id=config.pod_name, options=options)

    async with (
        open_plane(
            config.log_dir, project=project, svid_dir=config.svid_dir, standby=config.standby
        ) as plane,
        trio.open_nursery() as nursery,
    ):
        manifests: ManifestSource = await nursery.start(
            functools.partial(
                serve_manifest_directory,
                config.manifests,
                send=plane.journal.sender(),
                poll_interval=config.manifest_poll_interval,
                logged=plane.journal.state,  # the replayed state: a restart appends only what changed meanwhile
            )
        )
        mesh_config: MeshConfigFileSource | None = None
        if config.mesh_config is not None:
            mesh_config = await nursery.start(
                functools.partial(
                    serve_mesh_config_file,
                    config.mesh_config,
                    send=plane.journal.sender(),
                    current=lambda: plane.journal.state.kube.mesh_config,
                )
            )
        parts: dict[str, HasStatistics] = {"manifests": manifests}
        if config.spiffe_workload_socket is not None:
            parts["workload_api"] = await nursery.start(
                functools.partial(
                    serve_workload_api,
                    config.spiffe_workload_socket,
                    send=plane.journal.sender(),
                    publish_svids=True,
                )
            )
        bound = await nursery.start(
            functools.partial(plane.serve, xds=config.xds, admin_socket=config.admin_socket, parts=parts)
        )
        task_status.started(
            RunningEdge(
                journal=plane.journal,
                cache=plane.cache,
                server=plane.server,
                manifests=manifests,
                xds=bound,
                mesh_config=mesh_config,
            )
        )
