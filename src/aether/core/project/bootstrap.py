"""A snapshot as one static Envoy bootstrap: everything the xDS server would send, inline, for `envoy -c`.

What changes on the way (the resources are otherwise the ones the xDS server serves, byte for byte):

* EDS clusters become STATIC clusters holding their ClusterLoadAssignment as `load_assignment`;
* an HTTP connection manager's `rds` becomes the `route_config` it names, with `validate_clusters` on;
* SDS references lose their config source and name a secret of `static_resources.secrets` instead
  (https://www.envoyproxy.io/docs/envoy/latest/configuration/security/secret#static-secrets).

What cannot be static stays dynamic: on-demand cluster discovery (the node's catch-all route asks the agent for mesh
names it does not hold), the caller secrets the service clusters' certificate selector fetches over SDS (Envoy has
no static form of it: see `aether.core.project.tls`), and a secret the snapshot lacks. When anything still names the ADS stream, the bootstrap
gets an `ads_config` towards the agent's socket: Envoy starts without it and keeps retrying, and everything static
works meanwhile. A cluster's missing secret is asked for on a plain SDS stream instead (Envoy 1.40 crashes on
static clusters taking secrets over ADS); the agent serves ADS only, so such a cluster waits without a certificate:
a bootstrap that must carry TLS to backends needs the SVIDs in the state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, config_source_pb2, grpc_service_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf import any_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from aether.core.project.messages import milliseconds, pack, socket_address
from aether.core.project.names import XDS_CLUSTER
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE, Snapshot

AGENT_XDS_SOCKET = "/run/aether/xds.sock"
"""Where the agent serves xDS (DESIGN.md section 4): what a bootstrap asks for what it could not inline."""
NODE_CLUSTER = "aether"
LOCAL_NODE_ID = "local"
"""The node id of a snapshot projected for every pod (no node name): Envoy refuses SDS without a node id."""
"""The bootstrap's `node.cluster`: Envoy refuses dynamic secrets (SDS) without one, and nothing else reads it."""
XDS_CONNECT_TIMEOUT_MS = 1_000
"""The agent is a local socket: a second only expires when no agent runs, and Envoy then retries."""

_HCM = hcm_pb2.HttpConnectionManager.DESCRIPTOR.full_name
_SDS = secret_pb2.SdsSecretConfig.DESCRIPTOR.full_name
_CONFIG_SOURCE = config_source_pb2.ConfigSource.DESCRIPTOR.full_name
_ENVOY_GRPC = grpc_service_pb2.GrpcService.EnvoyGrpc.DESCRIPTOR.full_name
_HTTP_OPTIONS_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def static_bootstrap(snapshot: Snapshot, *, admin: tuple[str, int] | None = None) -> Any:
    """Return `snapshot` as an `envoy.config.bootstrap.v3.Bootstrap` with every resource it holds inline.

    Args:
        snapshot: The projected snapshot (node or edge).
        admin: Where Envoy's admin API listens, `(address, port)`; None leaves the admin API off.

    Returns:
        The bootstrap message: node id and cluster, static listeners, clusters and secrets (in name order), the admin
        address, and an `ads_config` only when something could not be made static (see the module docstring).
    """
    routes = {
        name: _parse(route_pb2.RouteConfiguration, item.body) for name, item in _items(snapshot, ROUTE_TYPE)
    }
    assignments = {
        name: _parse(endpoint_pb2.ClusterLoadAssignment, item.body)
        for name, item in _items(snapshot, ENDPOINT_TYPE)
    }
    secrets = [_parse(secret_pb2.Secret, item.body) for _, item in _items(snapshot, SECRET_TYPE)]
    inliner = _Inliner(routes=routes, secrets=frozenset(secret.name for secret in secrets))
    clusters = [
        inliner.rewrite(_static_cluster(_parse(cluster_pb2.Cluster, item.body), assignments), cluster=True)
        for _, item in _items(snapshot, CLUSTER_TYPE)
    ]
    listeners = [
        inliner.rewrite(_parse(listener_pb2.Listener, item.body))
        for _, item in _items(snapshot, LISTENER_TYPE)
    ]
    bootstrap = bootstrap_pb2.Bootstrap()
    bootstrap.node.id = snapshot.node_id or LOCAL_NODE_ID
    bootstrap.node.cluster = NODE_CLUSTER
    bootstrap.static_resources.listeners.extend(listeners)
    bootstrap.static_resources.clusters.extend(clusters)
    bootstrap.static_resources.secrets.extend(secrets)
    if inliner.needs_agent:
        bootstrap.static_resources.clusters.append(_xds_cluster())
    if inliner.needs_ads:
        ads = bootstrap.dynamic_resources.ads_config
        ads.api_type = config_source_pb2.ApiConfigSource.DELTA_GRPC
        ads.transport_api_version = config_source_pb2.V3
        ads.grpc_services.append(
            grpc_service_pb2.GrpcService(
                envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=XDS_CLUSTER)
            )
        )
    if admin is not None:
        bootstrap.admin.address.CopyFrom(socket_address(admin[0], admin[1]))
    return bootstrap


def _items(snapshot: Snapshot, type_url: str) -> list[tuple[str, Any]]:
    return sorted(snapshot.of_type(type_url).items())


def _parse(cls: Callable[[], Message], body: bytes) -> Any:
    message = cls()
    message.ParseFromString(body)
    return message


def _static_cluster(cluster: Any, assignments: Mapping[str, Any]) -> Any:
    """Turn an EDS cluster into a STATIC one holding its load assignment (an empty one when the snapshot has none)."""
    if cluster.WhichOneof("cluster_discovery_type") != "type" or cluster.type != cluster_pb2.Cluster.EDS:
        return cluster
    name = cluster.eds_cluster_config.service_name or cluster.name
    cluster.ClearField("eds_cluster_config")
    cluster.type = cluster_pb2.Cluster.STATIC
    assignment = assignments.get(name)
    cluster.load_assignment.CopyFrom(
        assignment if assignment is not None else endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    )
    return cluster


def _agent_sds() -> Any:
    """A config source asking the agent over a gRPC stream of its own (not the ADS stream)."""
    return config_source_pb2.ConfigSource(
        api_config_source=config_source_pb2.ApiConfigSource(
            api_type=config_source_pb2.ApiConfigSource.DELTA_GRPC,
            transport_api_version=config_source_pb2.V3,
            grpc_services=[
                grpc_service_pb2.GrpcService(
                    envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=XDS_CLUSTER)
                )
            ],
        ),
        resource_api_version=config_source_pb2.V3,
    )


def _xds_cluster() -> Any:
    options = http_protocol_options_pb2.HttpProtocolOptions()
    options.explicit_http_config.http2_protocol_options.SetInParent()  # gRPC needs HTTP/2
    cluster = cluster_pb2.Cluster(
        name=XDS_CLUSTER,
        type=cluster_pb2.Cluster.STATIC,
        connect_timeout=milliseconds(XDS_CONNECT_TIMEOUT_MS),
        load_assignment=endpoint_pb2.ClusterLoadAssignment(
            cluster_name=XDS_CLUSTER,
            endpoints=[
                endpoint_components_pb2.LocalityLbEndpoints(
                    lb_endpoints=[
                        endpoint_components_pb2.LbEndpoint(
                            endpoint=endpoint_components_pb2.Endpoint(
                                address=address_pb2.Address(pipe=address_pb2.Pipe(path=AGENT_XDS_SOCKET))
                            )
                        )
                    ]
                )
            ],
        ),
    )
    cluster.typed_extension_protocol_options[_HTTP_OPTIONS_KEY].CopyFrom(pack(options))
    return cluster


class _Inliner:
    """Rewrites a resource in place: `rds` → `route_config`, SDS → static secret names; notes what still needs ADS.

    It walks every message field, unpacking `Any` configs of known types (filters and transport sockets are
    `Any`), so that a reference is found wherever the projection put it.
    """

    def __init__(self, *, routes: Mapping[str, Any], secrets: frozenset[str]) -> None:
        self._routes = routes
        self._secrets = secrets
        self._in_cluster = False
        self.needs_ads = False
        """True once a rewritten resource still names the ADS stream."""
        self.needs_agent = False
        """True once a rewritten resource still asks the agent for something (over ADS or not)."""

    def rewrite(self, message: Any, *, cluster: bool = False) -> Any:
        """Rewrite `message` (a cluster when `cluster`: see `_agent_sds`); return it."""
        self._in_cluster = cluster
        self._walk(message)
        return message

    def _walk(self, message: Any) -> None:
        name = message.DESCRIPTOR.full_name
        if name == _HCM and message.HasField("rds"):
            route = self._routes.get(message.rds.route_config_name)
            if route is not None:
                message.route_config.CopyFrom(route)
                # Static tables can be checked whole: Envoy then refuses a route naming a cluster that is not there.
                message.route_config.validate_clusters.value = True
        elif name == _SDS and message.name in self._secrets:
            message.ClearField("sds_config")
        elif name == _SDS and self._in_cluster and message.sds_config.HasField("ads"):
            # Envoy 1.40 crashes (SIGSEGV, in run and validate modes) on a static cluster whose TLS context takes
            # a secret over ADS; a plain gRPC SDS stream to the same agent starts cleanly and waits for it.
            message.sds_config.CopyFrom(_agent_sds())
            self.needs_agent = True
        elif name == _CONFIG_SOURCE and message.HasField("ads"):
            self.needs_ads = self.needs_agent = True
        elif name == _ENVOY_GRPC and message.cluster_name == XDS_CLUSTER:
            # A stream of its own to the agent: the service clusters' certificate selector fetches the callers'
            # secrets so (`aether.core.project.tls`), whatever the bootstrap holds.
            self.needs_agent = True
        for field, value in message.ListFields():
            if field.type != field.TYPE_MESSAGE:
                continue
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                items = value.values() if entry.fields_by_name["value"].message_type else ()
                for item in items:
                    self._walk_one(item)
            elif field.is_repeated:
                for item in value:
                    self._walk_one(item)
            else:
                self._walk_one(value)

    def _walk_one(self, message: Message) -> None:
        if isinstance(message, any_pb2.Any):
            inner = unpacked(message)
            if inner is not None:
                self._walk(inner)
                message.CopyFrom(pack(inner))
            return
        self._walk(message)


def unpacked(packed: Any) -> Message | None:
    """Return the message in `packed`, or None when its type is not in the descriptor pool (left as it is)."""
    try:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(packed.TypeName())
    except KeyError:
        return None
    message: Message = message_factory.GetMessageClass(descriptor)()
    packed.Unpack(message)
    return message
