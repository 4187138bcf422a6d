"""Tests of `aether.core.project.bootstrap`: a snapshot as one static Envoy bootstrap."""

from __future__ import annotations

from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from google.protobuf import any_pb2

from aether.core.gateway import GatewayView
from aether.core.project import project_node
from aether.core.project.bootstrap import AGENT_XDS_SOCKET, XDS_CLUSTER, static_bootstrap, unpacked
from aether.core.project.edge import EdgeOptions, edge_snapshot
from aether.core.project.messages import pack
from aether.core.snapshot import Resource, Snapshot
from aether.core.state import State
from aether.testing import (
    endpoints_snapshot_received,
    fold_events,
    make_endpoint,
    make_pod,
    pod_added,
    svid_rotated,
    trust_bundle_rotated,
)
from tests.core.project._helpers import NODE, WEB_ID, as_dict, hcm_of, unpack


def _node_snapshot() -> Snapshot:
    state = fold_events(
        pod_added(make_pod(annotations={"config.aether.io/upstreams": "default/web"})),
        endpoints_snapshot_received(make_endpoint()),
        svid_rotated(),
        trust_bundle_rotated(),
    )
    return project_node(state, node_name=NODE, now=0)


def _tls_contexts(cluster: Any) -> list[Any]:
    sockets = [cluster.transport_socket] if cluster.HasField("transport_socket") else []
    sockets += [match.transport_socket for match in cluster.transport_socket_matches]
    return [unpack(socket.typed_config, tls_pb2.UpstreamTlsContext) for socket in sockets]


def test_eds_clusters_become_static_with_their_load_assignment() -> None:
    """Every EDS cluster is STATIC and holds the ClusterLoadAssignment of its name; the others stay as they are."""
    snapshot = _node_snapshot()
    bootstrap = static_bootstrap(snapshot)
    clusters = {cluster.name: cluster for cluster in bootstrap.static_resources.clusters}
    web = clusters["web.default.aether.internal"]
    assert web.type == cluster_pb2.Cluster.STATIC
    assert not web.HasField("eds_cluster_config")
    assert web.load_assignment.cluster_name == "web.default.aether.internal"
    assert [
        item.endpoint.address.socket_address.port_value
        for item in web.load_assignment.endpoints[0].lb_endpoints
    ] == [18008]
    assert clusters["passthrough_original_dst"].type == cluster_pb2.Cluster.ORIGINAL_DST
    assert list(clusters) == [
        *sorted(clusters[name].name for name in clusters if name != XDS_CLUSTER),
        XDS_CLUSTER,
    ]


def test_route_tables_are_inlined_and_checked_and_secrets_are_static() -> None:
    """HCMs carry their route table inline (validate_clusters on); SDS references name static secrets."""
    bootstrap = static_bootstrap(_node_snapshot())
    listener = next(
        item for item in bootstrap.static_resources.listeners if item.name.startswith("outbound_http_")
    )
    hcm = hcm_of(listener.filter_chains[0])
    assert hcm.WhichOneof("route_specifier") == "route_config"
    assert hcm.route_config.name == "out_http"
    assert hcm.route_config.validate_clusters.value is True
    assert [secret.name for secret in bootstrap.static_resources.secrets] == [
        "caller:fallback",
        f"caller:{WEB_ID}",
        "spiffe://aether.internal",
        WEB_ID,
    ]
    web = next(
        item for item in bootstrap.static_resources.clusters if item.name == "web.default.aether.internal"
    )
    (context,) = _tls_contexts(web)
    validation = context.common_tls_context.combined_validation_context.validation_context_sds_secret_config
    assert as_dict(validation) == {"name": "spiffe://aether.internal"}
    # The caller's own certificate has no static form: the selector keeps fetching it from the agent.
    selector = unpacked(context.common_tls_context.custom_tls_certificate_selector.typed_config)
    assert selector is not None
    assert as_dict(selector)["config_source"]["api_config_source"]["grpc_services"] == [
        {"envoy_grpc": {"cluster_name": XDS_CLUSTER}}
    ]
    assert XDS_CLUSTER in [item.name for item in bootstrap.static_resources.clusters]


def test_what_stays_dynamic_gets_an_ads_config_towards_the_agent() -> None:
    """The on-demand filter still names ADS: the bootstrap adds the agent's socket as its xDS cluster."""
    bootstrap = static_bootstrap(_node_snapshot(), admin=("127.0.0.1", 9901))
    assert bootstrap.node.id == NODE
    assert as_dict(bootstrap.admin) == {
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 9901}}
    }
    xds = next(item for item in bootstrap.static_resources.clusters if item.name == XDS_CLUSTER)
    assert xds.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.pipe.path == AGENT_XDS_SOCKET
    assert as_dict(bootstrap.dynamic_resources) == {
        "ads_config": {
            "api_type": "DELTA_GRPC",
            "transport_api_version": "V3",
            "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
        }
    }


def test_a_fully_static_snapshot_needs_no_ads_and_unknown_configs_are_kept() -> None:
    """Without ADS references there is no xDS cluster; an Any of an unknown type and a missing CLA are kept safe."""
    eds = cluster_pb2.Cluster(name="lonely", type=cluster_pb2.Cluster.EDS)
    eds.eds_cluster_config.service_name = "lonely-cla"
    foreign = any_pb2.Any(type_url="type.googleapis.com/example.Unknown", value=b"\x08\x01")
    listener = listener_pb2.Listener(name="l")
    chain = listener.filter_chains.add()
    chain.filters.add(name="example.unknown", typed_config=foreign)
    chain.transport_socket.CopyFrom(
        base_pb2.TransportSocket(name="raw", typed_config=pack(tls_pb2.DownstreamTlsContext()))
    )
    snapshot = Snapshot.build(
        node_id="edge-0", resources=[Resource.from_message(eds), Resource.from_message(listener)]
    )
    bootstrap = static_bootstrap(snapshot)
    assert not bootstrap.HasField("dynamic_resources")
    assert not bootstrap.HasField("admin")
    (cluster,) = bootstrap.static_resources.clusters
    assert as_dict(cluster.load_assignment) == {"cluster_name": "lonely-cla"}
    assert bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config == foreign


def test_a_cluster_secret_the_snapshot_lacks_is_asked_for_on_a_plain_sds_stream() -> None:
    """A static cluster never takes a secret over ADS (Envoy 1.40 crashes on it): it asks the agent's xDS cluster on
    an SDS stream of its own, and no `ads_config` is added for it alone."""
    snapshot = edge_snapshot(
        GatewayView(backend_clusters=frozenset(("web.default.aether.internal",))),
        State(),
        node_id="edge-0",
        options=EdgeOptions(),
    )
    bootstrap = static_bootstrap(snapshot)
    assert not bootstrap.HasField("dynamic_resources")
    web = next(
        item for item in bootstrap.static_resources.clusters if item.name == "web.default.aether.internal"
    )
    (context,) = _tls_contexts(web)
    (certificate,) = context.common_tls_context.tls_certificate_sds_secret_configs
    assert as_dict(certificate.sds_config) == {
        "api_config_source": {
            "api_type": "DELTA_GRPC",
            "transport_api_version": "V3",
            "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
        },
        "resource_api_version": "V3",
    }
    assert XDS_CLUSTER in [item.name for item in bootstrap.static_resources.clusters]


def test_a_snapshot_of_every_pod_gets_a_node_id_envoy_accepts() -> None:
    """`project_node(node_name="")` (every pod, `aether render` without `--node`) has no node id; Envoy needs one."""
    from aether.core.project.bootstrap import LOCAL_NODE_ID, static_bootstrap
    from aether.core.state import EMPTY_STATE

    assert static_bootstrap(project_node(EMPTY_STATE, node_name="", now=0)).node.id == LOCAL_NODE_ID
