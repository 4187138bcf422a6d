"""mTLS between proxies: which certificate a caller presents upstream, and the TLS contexts of both ends.

Per-caller client certificates. One Envoy serves every pod of the node, yet each upstream connection must carry the
calling pod's own SVID. The pod's outbound and capture listeners run the `set_filter_state` network filter, which
stores two values shared with the upstream connection (`shared_with_upstream: ONCE`): the pod's SPIFFE ID under
`aether.source_identity`, a hashable string, so Envoy keys its upstream connection pools on it (two callers never
share a connection, so a certificate is never presented for another workload); and the name of the pod's caller
secret (`caller:<SPIFFE ID>`) under `envoy.tls.certificate_mappers.on_demand_secret`, a plain string.

Every service cluster of a node has one TLS transport socket whose certificate comes from Envoy's on-demand
certificate selector (`envoy.tls.certificate_selectors.on_demand_secret`, Envoy >= 1.40) with the upstream mapper
`envoy.tls.upstream_certificate_mappers.filter_state_override`: Envoy fetches, over SDS, the secret the connection's
filter state names, and presents it. A connection naming none presents `caller:fallback`. Clusters therefore do not
depend on which workloads run on the node or which SVIDs it holds: a new local identity is its pods' listeners and
its caller secret, never a cluster (the set of local identities used to be in every cluster, one socket each).

The caller secrets (`aether.core.project.secrets.caller_secrets`): `caller:<SPIFFE ID>` holds that workload's SVID,
or, while it has none, the node's fallback: the SVID of the node's first local workload holding one (sorted by
SPIFFE ID) or, when no local workload has one, the first SVID the node holds; `caller:fallback` holds the fallback.
A TLS context without a client certificate is never used: the callee requires one. Clusters are plaintext only when
the state holds no SVID at all (identity not deployed), and inbound listeners then accept plaintext too.

The selector's protos are not in xds-protos: its two messages are declared here from their field numbers (read from
the Envoy binary's descriptors) into the default descriptor pool, so they pack, print and parse like any other.
Envoy 1.40 crashes at start on a selector whose config source is `ads`: it names the bootstrap's xDS cluster
(`names.XDS_CLUSTER`) as a gRPC SDS source, which the control plane serves beside ADS (`XdsServer.services()`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from envoy.config.core.v3 import base_pb2, config_source_pb2, extension_pb2, grpc_service_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

from aether.core.events.identity import Svid
from aether.core.order import sorted_unique
from aether.core.project.messages import ads, pack
from aether.core.project.names import FALLBACK_CALLER_SECRET, XDS_CLUSTER, trust_bundle_name

TLS_SOCKET = "envoy.transport_sockets.tls"


SELECTOR = "envoy.tls.certificate_selectors.on_demand_secret"
SELECTOR_TYPE = "envoy.extensions.transport_sockets.tls.cert_selectors.on_demand_secret.v3.Config"
MAPPER = "envoy.tls.upstream_certificate_mappers.filter_state_override"
MAPPER_TYPE = "envoy.extensions.transport_sockets.tls.cert_mappers.filter_state_override.v3.Config"


@attrs.frozen(kw_only=True)
class UpstreamIdentity:
    """The certificate a cluster presents upstream: the caller's own (`per_caller`), one `secret` for every caller,
    or none (plaintext)."""

    secret: str = ""
    """The name of the secret every connection of the cluster presents (a SPIFFE ID, or a caller secret); empty
    with `per_caller` and when plaintext."""
    per_caller: bool = False
    """Present the secret the caller's listener names (see the module docstring): a node's service clusters."""
    sds_cluster: str = ""
    """Fetch `secret` and the trust bundle over SDS from this static cluster of the bootstrap (the SPIRE agent's
    Workload API socket: `aether bootstrap --spiffe-workload-socket`), not from the control plane's ADS; empty:
    ADS. SPIRE names its secrets as Aether does (the SPIFFE ID, and `spiffe://<trustDomain>` for the bundle)."""

    @property
    def plaintext(self) -> bool:
        """True when upstream connections carry no TLS (and inbound listeners accept plaintext)."""
        return not self.secret and not self.per_caller


PLAINTEXT = UpstreamIdentity()
PER_CALLER = UpstreamIdentity(per_caller=True)


def upstream_identity(svids: Mapping[str, object]) -> UpstreamIdentity:
    """Return what a node's service clusters present: the caller's own certificate, or plaintext when the node holds
    no SVID at all."""
    return PER_CALLER if svids else PLAINTEXT


def fallback_identity(local_identities: Iterable[str], svids: Mapping[str, Svid]) -> str:
    """Return the SPIFFE ID whose SVID callers without one of their own present: the first local identity (sorted)
    holding an SVID, else the first SVID the node holds; empty when it holds none."""
    for identity in sorted_unique(local_identities):
        if identity in svids:
            return identity
    return min(svids) if svids else ""


def _selector_classes() -> tuple[Any, Any]:
    """Return the message classes of the selector's and the mapper's `Config` (declared into the default pool
    unless it already knows them: a later xds-protos may ship them)."""
    pool = descriptor_pool.Default()
    try:
        selector, mapper = pool.FindMessageTypeByName(SELECTOR_TYPE), pool.FindMessageTypeByName(MAPPER_TYPE)
    except KeyError:
        field = descriptor_pb2.FieldDescriptorProto
        mapper_file = descriptor_pb2.FileDescriptorProto(
            name="aether/envoy/cert_mappers/filter_state_override.proto",
            package=MAPPER_TYPE.rsplit(".", 1)[0],
            syntax="proto3",
            message_type=[
                descriptor_pb2.DescriptorProto(
                    name="Config",
                    field=[
                        field(
                            name="default_value", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL
                        )
                    ],
                )
            ],
        )
        selector_file = descriptor_pb2.FileDescriptorProto(
            name="aether/envoy/cert_selectors/on_demand_secret.proto",
            package=SELECTOR_TYPE.rsplit(".", 1)[0],
            syntax="proto3",
            dependency=[config_source_pb2.DESCRIPTOR.name, extension_pb2.DESCRIPTOR.name],
            message_type=[
                descriptor_pb2.DescriptorProto(
                    name="Config",
                    field=[
                        field(
                            name="config_source",
                            number=1,
                            type=field.TYPE_MESSAGE,
                            label=field.LABEL_OPTIONAL,
                            type_name=f".{config_source_pb2.ConfigSource.DESCRIPTOR.full_name}",
                        ),
                        field(
                            name="certificate_mapper",
                            number=2,
                            type=field.TYPE_MESSAGE,
                            label=field.LABEL_OPTIONAL,
                            type_name=f".{extension_pb2.TypedExtensionConfig.DESCRIPTOR.full_name}",
                        ),
                        field(
                            name="prefetch_secret_names",
                            number=3,
                            type=field.TYPE_STRING,
                            label=field.LABEL_REPEATED,
                        ),
                    ],
                )
            ],
        )
        pool.Add(mapper_file)
        pool.Add(selector_file)
        selector, mapper = pool.FindMessageTypeByName(SELECTOR_TYPE), pool.FindMessageTypeByName(MAPPER_TYPE)
    return message_factory.GetMessageClass(selector), message_factory.GetMessageClass(mapper)


SelectorConfig, MapperConfig = _selector_classes()


def grpc_source(cluster: str) -> Any:
    """Return a config source asking the gRPC (state of the world) xDS server behind the bootstrap's `cluster`."""
    return config_source_pb2.ConfigSource(
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


@functools.cache
def caller_selector() -> Any:
    """Return the certificate selector presenting the caller secret the connection's filter state names
    (`caller:fallback` when it names none), fetched over SDS from the bootstrap's xDS cluster.

    One shared message (every cluster embeds it): embed it, which copies; never mutate it.
    """
    mapper = extension_pb2.TypedExtensionConfig(
        name=MAPPER, typed_config=pack(MapperConfig(default_value=FALLBACK_CALLER_SECRET))
    )
    config = SelectorConfig(config_source=grpc_source(XDS_CLUSTER), certificate_mapper=mapper)
    return extension_pb2.TypedExtensionConfig(name=SELECTOR, typed_config=pack(config))


def _sds(name: str, *, cluster: str = "") -> Any:
    if not cluster:
        return secret_pb2.SdsSecretConfig(name=name, sds_config=ads())
    return secret_pb2.SdsSecretConfig(name=name, sds_config=grpc_source(cluster))


def _san(matcher: Any) -> Any:
    return common_pb2.SubjectAltNameMatcher(san_type=common_pb2.SubjectAltNameMatcher.URI, matcher=matcher)


def _common(secret: str, *, trust_domain: str, peer: Any, alpn: Iterable[str], sds_cluster: str = "") -> Any:
    """The common TLS context presenting `secret` (empty: the caller's own, through `caller_selector`)."""
    context = tls_pb2.CommonTlsContext(
        combined_validation_context=tls_pb2.CommonTlsContext.CombinedCertificateValidationContext(
            default_validation_context=common_pb2.CertificateValidationContext(
                match_typed_subject_alt_names=[_san(peer)]
            ),
            validation_context_sds_secret_config=_sds(trust_bundle_name(trust_domain), cluster=sds_cluster),
        ),
        alpn_protocols=list(alpn),
    )
    if secret:
        context.tls_certificate_sds_secret_configs.append(_sds(secret, cluster=sds_cluster))
    else:
        context.custom_tls_certificate_selector.CopyFrom(caller_selector())
    return context


def upstream_socket(
    identity: UpstreamIdentity, *, peer: str, trust_domain: str, alpn: Iterable[str], sni: str = ""
) -> Any:
    """Return a TLS transport socket presenting what `identity` says (not plaintext) and accepting only the
    SPIFFE ID `peer` (the secrets from `identity.sds_cluster`'s SDS when given, else from ADS; a caller's own
    from the bootstrap's xDS cluster)."""
    assert not identity.plaintext, "a plaintext identity has no TLS socket: this is a bug"
    context = tls_pb2.UpstreamTlsContext(
        common_tls_context=_common(
            "" if identity.per_caller else identity.secret,
            trust_domain=trust_domain,
            peer=string_pb2.StringMatcher(exact=peer),
            alpn=alpn,
            sds_cluster=identity.sds_cluster,
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


def apply_upstream_tls(
    cluster: Any,
    identity: UpstreamIdentity,
    *,
    peer: str,
    trust_domain: str,
    alpn: Iterable[str],
    sni: str = "",
) -> None:
    """Give `cluster` the client certificate of `identity` (nothing when it is plaintext)."""
    if identity.plaintext:
        return
    cluster.transport_socket.CopyFrom(
        upstream_socket(identity, peer=peer, trust_domain=trust_domain, alpn=alpn, sni=sni)
    )
