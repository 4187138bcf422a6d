"""Clusters: the EDS clusters of mesh services, the static app clusters of local pods, and the passthrough.

Service clusters (all EDS over ADS, their ClusterLoadAssignment named like the cluster):

* `<sa>.<ns>.<meshDomain>`: HTTP to each endpoint's own port. ALPN h2 and no SNI select the callee's `in_<pod>`
  chain, which delivers to the pod's primary port.
* `<sa>.<ns>.<meshDomain>:<port>`: HTTP to `port` on the endpoints advertising it; SNI = the port selects the
  callee's `in_<pod>_<port>` chain (the original system's SNI-per-port demultiplexing).
* `tcp:<sa>.<ns>.<meshDomain>`: raw TCP, TLS with neither ALPN nor SNI: the callee's default (TCP) chain.
* `udp:<sa>.<ns>.<meshDomain>:<port>`: datagrams in plaintext straight to the endpoints' UDP `port` (no proxy on the
  callee's side: DTLS is not implemented, and mTLS is a TCP construct).

A cluster that routes send Services' selections to subsets its endpoints by their labels (`aether.core.project.subsets`).
"""

from __future__ import annotations

import functools
from typing import Any

from envoy.config.cluster.v3 import circuit_breaker_pb2, cluster_pb2, outlier_detection_pb2
from envoy.config.core.v3 import address_pb2, protocol_pb2, socket_option_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from aether.core.events.pods import Pod
from aether.core.gateway.ir import SelectorKeys
from aether.core.project.messages import ads, milliseconds, pack, seconds, shared_parts, socket_address
from aether.core.project.names import LOOPBACK, PASSTHROUGH_CLUSTER, PASSTHROUGH_MARK, app_cluster_name
from aether.core.project.subsets import subset_config
from aether.core.project.tls import UpstreamIdentity, apply_upstream_tls
from aether.core.snapshot import CLUSTER_TYPE, Resource

CONNECT_TIMEOUT_MS = 2_000
"""Upstream connect timeout (the original system's): a pod IP answers in well under a millisecond, so two seconds
only ever expires on a dead endpoint, which a retry then avoids."""
UPSTREAM_IDLE_SECONDS = 30
"""Close idle upstream connections after 30 s (Envoy's default of an hour let a node accumulate ~41k connections
in the original system)."""
MAX_RETRIES = 16
"""Concurrent retries per cluster (Envoy's default of 3 starves a busy cluster of the retries the contract needs)."""

HTTP2_ALPN = ("h2",)
HTTP_OPTIONS_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

SOL_SOCKET = 1
SO_MARK = 36


def http_options(*, http2: bool, follow_downstream: bool = False) -> Any:
    """Return a cluster's HTTP protocol options: HTTP/2, HTTP/1.1, or (`follow_downstream`) the downstream's own
    protocol; idle upstream connections close after `UPSTREAM_IDLE_SECONDS`."""
    options = http_protocol_options_pb2.HttpProtocolOptions(
        common_http_protocol_options=protocol_pb2.HttpProtocolOptions(
            idle_timeout=seconds(UPSTREAM_IDLE_SECONDS)
        )
    )
    if follow_downstream:
        options.use_downstream_protocol_config.http_protocol_options.SetInParent()
        options.use_downstream_protocol_config.http2_protocol_options.SetInParent()
    elif http2:
        options.explicit_http_config.http2_protocol_options.SetInParent()
    else:
        options.explicit_http_config.http_protocol_options.SetInParent()
    return options


def eds_cluster(name: str) -> Any:
    """Return the bare EDS cluster `name` over ADS: the connect timeout, and a panic threshold of 0 (never send to
    unhealthy or draining endpoints, even when most are: Envoy's default panics at 50%)."""
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ads()),
        connect_timeout=milliseconds(CONNECT_TIMEOUT_MS),
        common_lb_config=cluster_pb2.Cluster.CommonLbConfig(
            healthy_panic_threshold=percent_pb2.Percent(value=0)
        ),
    )


def service_cluster(
    name: str,
    *,
    identity: UpstreamIdentity,
    peer: str,
    trust_domain: str,
    http: bool,
    sni: str = "",
    subsets: SelectorKeys = (),
) -> Any:
    """Return the EDS cluster `name` of a mesh service whose endpoints present the SPIFFE ID `peer`.

    Args:
        name: The cluster name (also the name of its ClusterLoadAssignment).
        identity: What the node's callers present upstream (see `aether.core.project.tls`).
        peer: The SPIFFE ID the endpoints must present (pinned by URI SAN).
        trust_domain: The trust domain whose bundle validates the endpoints.
        http: True for HTTP/2 with ALPN h2; False for raw TCP (no ALPN, no SNI).
        sni: The SNI to send (a port number, selecting the callee's chain for that port), or empty.
        subsets: The label key sets of the Service selectors routes send to the cluster with (see
            `aether.core.project.subsets`); empty: no subsets.
    """
    cluster = _service_cluster_base(name, http=http, subsets=subsets)
    apply_upstream_tls(
        cluster,
        identity,
        peer=peer,
        trust_domain=trust_domain,
        alpn=HTTP2_ALPN if http else (),
        sni=sni if http else "",
    )
    return cluster


def service_cluster_resource(
    name: str,
    *,
    identity: UpstreamIdentity,
    peer: str,
    trust_domain: str,
    http: bool,
    sni: str = "",
    subsets: SelectorKeys = (),
) -> Resource:
    """Return `service_cluster(...)` as a snapshot resource (referencing its load assignment), serialized in parts:
    its name, the fields every cluster of its kind shares before its transport socket (one object for all), the
    socket, and the shared fields after it (deterministic serialization writes fields in field-number order)."""
    message = service_cluster(
        name, identity=identity, peer=peer, trust_domain=trust_domain, http=http, sni=sni, subsets=subsets
    )
    body: bytes = message.SerializeToString(deterministic=True)
    return Resource.from_parts(
        CLUSTER_TYPE,
        name=name,
        parts=shared_parts(body, _unnamed_base(http=http, subsets=subsets)),
        references=(name,),
    )


@functools.lru_cache(maxsize=64)
def _unnamed_base(*, http: bool, subsets: SelectorKeys) -> tuple[bytes, bytes]:
    """A service cluster's fields after its name (field 1) and before its transport socket, and those after the
    socket, serialized: the same for every cluster of a kind."""
    cluster = _service_cluster_base("", http=http, subsets=subsets)
    before, after = cluster_pb2.Cluster(), cluster_pb2.Cluster()
    before.CopyFrom(cluster)
    after.CopyFrom(cluster)
    for field, _ in cluster.ListFields():
        (after if field.number < _TRANSPORT_SOCKET_FIELD else before).ClearField(field.name)
    return before.SerializeToString(deterministic=True), after.SerializeToString(deterministic=True)


_TRANSPORT_SOCKET_FIELD = cluster_pb2.Cluster.DESCRIPTOR.fields_by_name["transport_socket"].number


def _service_cluster_base(name: str, *, http: bool, subsets: SelectorKeys) -> Any:
    """Return a service cluster without its TLS (see `service_cluster`)."""
    cluster = eds_cluster(name)
    cluster.circuit_breakers.CopyFrom(
        circuit_breaker_pb2.CircuitBreakers(
            thresholds=[
                circuit_breaker_pb2.CircuitBreakers.Thresholds(
                    max_retries=wrappers_pb2.UInt32Value(value=MAX_RETRIES)
                )
            ]
        )
    )
    cluster.outlier_detection.CopyFrom(
        outlier_detection_pb2.OutlierDetection(
            # Local-origin errors (connect failures, resets) eject on their own count; 5xx from apps after five.
            split_external_local_origin_errors=True,
            consecutive_local_origin_failure=wrappers_pb2.UInt32Value(value=3),
            consecutive_5xx=wrappers_pb2.UInt32Value(value=5),
            interval=seconds(10),
            base_ejection_time=seconds(30),
            max_ejection_percent=wrappers_pb2.UInt32Value(value=50),
        )
    )
    if subsets:
        cluster.lb_subset_config.CopyFrom(subset_config(subsets))
    if http:
        cluster.typed_extension_protocol_options[HTTP_OPTIONS_KEY].CopyFrom(pack(http_options(http2=True)))
    return cluster


def udp_cluster(name: str) -> Any:
    """Return the EDS cluster `name` of a mesh service's UDP port: plaintext, no health checks of its own (the
    registry's endpoint health applies), Envoy's default of one session per client address and port."""
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ads()),
        # 0, as for every service cluster: never send to unhealthy or draining endpoints.
        common_lb_config=cluster_pb2.Cluster.CommonLbConfig(
            healthy_panic_threshold=percent_pb2.Percent(value=0)
        ),
    )


def app_cluster(pod: Pod, port: int) -> Any:
    """Return the static cluster delivering inbound traffic to `pod`'s app on `port`.

    With a network namespace, the upstream socket is created inside it (`upstream_bind_config` with
    `network_namespace_filepath`; Envoy refuses a namespace on a host address) and dials the app on its own
    loopback. In local mode (no namespace) it dials the pod's IP.
    """
    host = LOOPBACK if pod.netns else pod.ips[0]
    cluster = cluster_pb2.Cluster(
        name=app_cluster_name(pod, port),
        type=cluster_pb2.Cluster.STATIC,
        connect_timeout=milliseconds(CONNECT_TIMEOUT_MS),
        load_assignment=endpoint_pb2.ClusterLoadAssignment(
            cluster_name=app_cluster_name(pod, port),
            endpoints=[
                endpoint_components_pb2.LocalityLbEndpoints(
                    lb_endpoints=[
                        endpoint_components_pb2.LbEndpoint(
                            endpoint=endpoint_components_pb2.Endpoint(address=socket_address(host, port))
                        )
                    ]
                )
            ],
        ),
    )
    if pod.netns:
        cluster.upstream_bind_config.source_address.CopyFrom(
            address_pb2.SocketAddress(address=LOOPBACK, port_value=0, network_namespace_filepath=pod.netns)
        )
    return cluster


def passthrough_cluster() -> Any:
    """Return `passthrough_original_dst`: to the destination the connection had before capture, marked so the
    capture rules let it go. HTTP keeps the downstream's protocol version."""
    cluster = cluster_pb2.Cluster(
        name=PASSTHROUGH_CLUSTER,
        type=cluster_pb2.Cluster.ORIGINAL_DST,
        lb_policy=cluster_pb2.Cluster.CLUSTER_PROVIDED,
        connect_timeout=milliseconds(CONNECT_TIMEOUT_MS),
        upstream_bind_config=address_pb2.BindConfig(
            socket_options=[
                socket_option_pb2.SocketOption(
                    description="SO_MARK: never capture a passthrough connection again",
                    level=SOL_SOCKET,
                    name=SO_MARK,
                    int_value=PASSTHROUGH_MARK,
                    state=socket_option_pb2.SocketOption.STATE_PREBIND,
                )
            ]
        ),
    )
    cluster.typed_extension_protocol_options[HTTP_OPTIONS_KEY].CopyFrom(
        pack(http_options(http2=False, follow_downstream=True))
    )
    return cluster
