"""mTLS between proxies: which certificate a caller presents upstream, and the TLS contexts of both ends.

Per-caller client certificates. One Envoy serves every pod of the node, yet each upstream connection must carry the
calling pod's own SVID. The pod's outbound and capture listeners run the `set_filter_state` network filter, which
stores the pod's SPIFFE ID under `aether.source_identity` as a hashable string shared with the upstream connection
(`shared_with_upstream: ONCE`). Every service cluster has one `transport_socket_matches` entry per local identity
holding an SVID (named by the SPIFFE ID), and a `transport_socket_matcher` (Envoy >= 1.37) whose input is the
transport-socket `FilterStateInput` of that key, mapping each SPIFFE ID exactly to the entry of the same name.
Because the shared value is hashable, Envoy also keys its upstream connection pools on it: two callers never share
a connection, so a certificate is never presented for another workload. `envoy --mode validate` accepts this.

Keying on the identity rather than on the pod keeps clusters independent of pod churn: pods of one service account
share one entry, and a cluster changes only when the set of local identities does.

Callers without an SVID of their own (a pod whose SVID has not arrived) get the matcher's `on_no_match`: the SVID of
the node's first local workload (sorted by SPIFFE ID) or, when no local workload has one, the first SVID the node
holds. A TLS context without a client certificate is never used: the callee requires one. Clusters are plaintext only
when the state holds no SVID at all (identity not deployed), and inbound listeners then accept plaintext too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, config_source_pb2, grpc_service_pb2
from envoy.extensions.matching.common_inputs.transport_socket.v3 import transport_socket_inputs_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import wrappers_pb2

from aether.core.events.identity import Svid
from aether.core.order import sorted_unique
from aether.core.project.messages import ads, pack
from aether.core.project.names import SOURCE_IDENTITY_KEY, trust_bundle_name

TLS_SOCKET = "envoy.transport_sockets.tls"


@attrs.frozen(kw_only=True)
class UpstreamIdentity:
    """The certificates the node's service clusters present upstream.

    Invariant: `fallback` is empty exactly when the node runs plaintext (it holds no SVID), and then so is
    `sources`; otherwise `fallback` is set, and is `sources[0]` when `sources` is not empty.
    """

    sources: tuple[str, ...] = ()
    """SPIFFE IDs of the local workloads holding an SVID, sorted: each gets its own transport socket."""
    fallback: str = ""
    """The SPIFFE ID presented for callers without an SVID of their own."""
    sds_cluster: str = ""
    """Fetch the SVID and the trust bundle over SDS from this static cluster of the bootstrap (the SPIRE agent's
    Workload API socket: `aether bootstrap --spiffe-workload-socket`), not from the control plane's ADS; empty:
    ADS. SPIRE names its secrets as Aether does (the SPIFFE ID, and `spiffe://<trustDomain>` for the bundle)."""

    @property
    def plaintext(self) -> bool:
        """True when no SVID exists at all: upstream connections and inbound listeners carry no TLS."""
        return not self.fallback

    @property
    def presented(self) -> tuple[str, ...]:
        """Every SPIFFE ID whose certificate a cluster may present (the SDS secrets clusters need)."""
        return self.sources or ((self.fallback,) if self.fallback else ())


PLAINTEXT = UpstreamIdentity()


def upstream_identity(local_identities: Iterable[str], svids: Mapping[str, Svid]) -> UpstreamIdentity:
    """Return what the node's clusters present, given its workloads' SPIFFE IDs and the SVIDs it holds."""
    if not svids:
        return PLAINTEXT
    sources = tuple(identity for identity in sorted_unique(local_identities) if identity in svids)
    return UpstreamIdentity(sources=sources, fallback=sources[0] if sources else min(svids))


def _sds(name: str, *, cluster: str = "") -> Any:
    if not cluster:
        return secret_pb2.SdsSecretConfig(name=name, sds_config=ads())
    source = config_source_pb2.ConfigSource(
        api_config_source=config_source_pb2.ApiConfigSource(
            api_type=config_source_pb2.ApiConfigSource.GRPC,
            transport_api_version=config_source_pb2.V3,
            grpc_services=[
                grpc_service_pb2.GrpcService(
                    envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=cluster)
                )
            ],
        ),
        resource_api_version=config_source_pb2.V3,
    )
    return secret_pb2.SdsSecretConfig(name=name, sds_config=source)


def _san(matcher: Any) -> Any:
    return common_pb2.SubjectAltNameMatcher(san_type=common_pb2.SubjectAltNameMatcher.URI, matcher=matcher)


def _common(
    identity: str, *, trust_domain: str, peer: Any, alpn: Iterable[str], sds_cluster: str = ""
) -> Any:
    return tls_pb2.CommonTlsContext(
        tls_certificate_sds_secret_configs=[_sds(identity, cluster=sds_cluster)],
        combined_validation_context=tls_pb2.CommonTlsContext.CombinedCertificateValidationContext(
            default_validation_context=common_pb2.CertificateValidationContext(
                match_typed_subject_alt_names=[_san(peer)]
            ),
            validation_context_sds_secret_config=_sds(trust_bundle_name(trust_domain), cluster=sds_cluster),
        ),
        alpn_protocols=list(alpn),
    )


def upstream_socket(
    identity: str, *, peer: str, trust_domain: str, alpn: Iterable[str], sni: str = "", sds_cluster: str = ""
) -> Any:
    """Return a TLS transport socket presenting `identity`'s SVID and accepting only the SPIFFE ID `peer` (the
    secrets from `sds_cluster`'s SDS when given, else from ADS)."""
    context = tls_pb2.UpstreamTlsContext(
        common_tls_context=_common(
            identity,
            trust_domain=trust_domain,
            peer=string_pb2.StringMatcher(exact=peer),
            alpn=alpn,
            sds_cluster=sds_cluster,
        ),
        sni=sni,
    )
    return base_pb2.TransportSocket(name=TLS_SOCKET, typed_config=pack(context))


def downstream_socket(identity: str, *, trust_domain: str, alpn: Iterable[str]) -> Any:
    """Return a TLS transport socket serving `identity`'s SVID to callers of the trust domain only."""
    context = tls_pb2.DownstreamTlsContext(
        common_tls_context=_common(
            identity,
            trust_domain=trust_domain,
            peer=string_pb2.StringMatcher(prefix=f"{trust_bundle_name(trust_domain)}/"),
            alpn=alpn,
        ),
        require_client_certificate=wrappers_pb2.BoolValue(value=True),
    )
    return base_pb2.TransportSocket(name=TLS_SOCKET, typed_config=pack(context))


def _choose(name: str) -> Any:
    return pack(transport_socket_inputs_pb2.TransportSocketNameAction(name=name))


def apply_upstream_tls(
    cluster: Any,
    identity: UpstreamIdentity,
    *,
    peer: str,
    trust_domain: str,
    alpn: Iterable[str],
    sni: str = "",
) -> None:
    """Give `cluster` the per-caller client certificates of `identity` (nothing when the node is plaintext)."""
    if identity.plaintext:
        return
    alpn = tuple(alpn)
    if not identity.sources:  # one certificate for every caller: no choice to make
        cluster.transport_socket.CopyFrom(
            upstream_socket(
                identity.fallback,
                peer=peer,
                trust_domain=trust_domain,
                alpn=alpn,
                sni=sni,
                sds_cluster=identity.sds_cluster,
            )
        )
        return
    cluster.MergeFromString(
        b"".join(upstream_tls_parts(identity, peer=peer, trust_domain=trust_domain, alpn=alpn, sni=sni))
    )


def upstream_tls_parts(
    identity: UpstreamIdentity, *, peer: str, trust_domain: str, alpn: tuple[str, ...], sni: str = ""
) -> tuple[bytes, ...]:
    """Return the serialized `transport_socket_matches` entries (one per source, in order, as one part) and the
    `transport_socket_matcher` of a cluster whose callers present `identity`'s sources (`identity.sources` not
    empty): fields 43 and 59 of a Cluster, the last it has, so a cluster's bytes without them followed by these are
    the bytes of the whole (deterministic serialization writes fields in field-number order).

    The matcher depends on the identity alone: every cluster holds the same bytes object (by reference).
    """
    entries = tuple(
        _match_entry(
            source, peer=peer, trust_domain=trust_domain, alpn=alpn, sni=sni, sds_cluster=identity.sds_cluster
        )
        for source in identity.sources
    )
    return (b"".join(entries), _matcher_part(identity))


def _match_entry(
    source: str, *, peer: str, trust_domain: str, alpn: tuple[str, ...], sni: str, sds_cluster: str
) -> bytes:
    cluster = cluster_pb2.Cluster()
    cluster.transport_socket_matches.add(
        name=source,
        transport_socket=upstream_socket(
            source, peer=peer, trust_domain=trust_domain, alpn=alpn, sni=sni, sds_cluster=sds_cluster
        ),
    )
    body: bytes = cluster.SerializeToString(deterministic=True)
    return body


@functools.lru_cache(maxsize=16)
def _matcher_part(identity: UpstreamIdentity) -> bytes:
    cluster = cluster_pb2.Cluster()
    matcher = cluster.transport_socket_matcher
    tree = matcher.matcher_tree
    tree.input.name = "source-identity"
    tree.input.typed_config.CopyFrom(
        pack(transport_socket_inputs_pb2.FilterStateInput(key=SOURCE_IDENTITY_KEY))
    )
    for source in identity.sources:
        action = tree.exact_match_map.map[source].action
        action.name = "transport-socket"
        action.typed_config.CopyFrom(_choose(source))
    matcher.on_no_match.action.name = "transport-socket"
    matcher.on_no_match.action.typed_config.CopyFrom(_choose(identity.fallback))
    body: bytes = cluster.SerializeToString(deterministic=True)
    return body
