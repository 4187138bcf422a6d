"""Hypothesis strategies of Gateway API objects: routes, gateways and grants, mostly valid, some broken on purpose.

Kept beside `strategies.py` (which holds one strategy per event type) because these build the specs inside the
events: the spec values come from small pools so that routes keep meeting the same hostnames, paths, parents and
backends (and so collide, tie and shadow each other), and a minority of values break a schema or CEL rule.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from aether.core.events import Event
from aether.core.events.kube import KubeObject, KubeService, ObjectMeta, ServicePort
from aether.core.events.registry import Endpoint, Protocol
from aether.core.reduce.kube import canonical_json
from aether.testing import builders
from aether.testing.gateway_objects import EDGE_LISTENER, edge_gateway_events, gateway_api_object

SERVICES = ("web", "api", "v1", "v2")
"""Services every generated state holds (namespace `default`); `other/db` exists too, behind a namespace."""
EDGE_REF = {"name": "edge", "namespace": "edge"}
SERVICE_REF = {"group": "", "kind": "Service", "port": 80}

_timestamps = st.sampled_from(["2024-01-01T00:00:00Z", "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"])
_route_names = st.sampled_from(["r1", "r2", "r3", "r4"])
_namespaces = st.sampled_from(["default", "default", "team"])

_hostnames = st.sampled_from(["a.example.com", "b.example.com", "*.example.com", "*.com", "shop.example.org"])
_paths = st.sampled_from(["/", "/a", "/a/", "/a/b", "/ab", "/x/y/z"])
_patterns = st.sampled_from(["/v[0-9]+", "/.*", "/a/.+"])
_path_types = st.sampled_from(["Exact", "PathPrefix", "PathPrefix", "RegularExpression"])
_methods = st.sampled_from(["GET", "POST", "DELETE"])
_values = st.sampled_from(["1", "blue", ".*", "[0-9]+"])


@st.composite
def _value_matches(draw: st.DrawFn, *, names: tuple[str, ...]) -> list[dict[str, Any]]:
    chosen = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    return [
        {
            "name": name,
            "value": draw(_values),
            **({"type": "RegularExpression"} if draw(st.booleans()) else {}),
        }
        for name in chosen
    ]


@st.composite
def http_matches(draw: st.DrawFn) -> dict[str, Any]:
    """One HTTPRoute match (header names distinct even case-insensitively, so counts are unambiguous)."""
    match: dict[str, Any] = {}
    if draw(st.booleans()):
        kind = draw(_path_types)
        match["path"] = {"type": kind, "value": draw(_patterns if kind == "RegularExpression" else _paths)}
    if draw(st.integers(0, 3)) == 0:
        match["method"] = draw(_methods)
    if draw(st.booleans()):
        match["headers"] = draw(_value_matches(names=("x-a", "x-b", "x-c")))
    if draw(st.integers(0, 2)) == 0:
        match["queryParams"] = draw(_value_matches(names=("q", "page")))
    return match


@st.composite
def grpc_matches(draw: st.DrawFn) -> dict[str, Any]:
    """One GRPCRoute match."""
    match: dict[str, Any] = {}
    if draw(st.booleans()):
        method: dict[str, Any] = {}
        if draw(st.booleans()):
            method["service"] = draw(st.sampled_from(["pkg.Svc", "pkg.Other", "pkg\\..*"]))
        if not method or draw(st.booleans()):
            method["method"] = draw(st.sampled_from(["Get", "Put", "Get_All"]))
        if draw(st.integers(0, 3)) == 0:
            method["type"] = "RegularExpression"
            method = {key: value if key == "type" else f"{value}.*" for key, value in method.items()}
        match["method"] = method
    if draw(st.booleans()):
        match["headers"] = draw(_value_matches(names=("x-a", "x-b")))
    return match


def _backend(name: str, *, weight: int | None = None, **extra: Any) -> dict[str, Any]:
    backend: dict[str, Any] = {"name": name, "port": 80, **extra}
    if weight is not None:
        backend["weight"] = weight
    return backend


_backends = st.one_of(
    st.builds(_backend, st.sampled_from(SERVICES), weight=st.sampled_from([None, 0, 1, 3, 100])),
    st.just(_backend("missing")),
    st.just(_backend("db", namespace="other")),
    st.just({"group": "example.com", "kind": "Bucket", "name": "b"}),
)

_FILTERS = [
    {
        "type": "RequestHeaderModifier",
        "requestHeaderModifier": {"set": [{"name": "x-env", "value": "prod"}], "remove": ["x-debug"]},
    },
    {
        "type": "ResponseHeaderModifier",
        "responseHeaderModifier": {"add": [{"name": "x-served", "value": "aether"}]},
    },
    {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "v2", "port": 80}, "percent": 50}},
    {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "missing", "port": 80}}},
    {"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example.com"}},
    {
        "type": "URLRewrite",
        "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}},
    },
    {"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/full"}}},
    {"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}},
    {
        "type": "RequestRedirect",
        "requestRedirect": {
            "hostname": "x.example.com",
            "statusCode": 308,
            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"},
        },
    },
    {"type": "ExtensionRef", "extensionRef": {"group": "example.com", "kind": "X", "name": "x"}},
]
_GRPC_FILTERS = [
    item
    for item in _FILTERS
    if item["type"] in ("RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror")
]


@st.composite
def _rule(draw: st.DrawFn, *, grpc: bool) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        rule["matches"] = draw(st.lists(grpc_matches() if grpc else http_matches(), max_size=3))
    filters = draw(st.lists(st.sampled_from(_GRPC_FILTERS if grpc else _FILTERS), max_size=1))
    if filters:
        rule["filters"] = filters
    if not any(item["type"] == "RequestRedirect" for item in filters) or draw(st.integers(0, 5)) == 0:
        rule["backendRefs"] = draw(st.lists(_backends, max_size=3))
    if not grpc and draw(st.integers(0, 3)) == 0:
        rule["timeouts"] = draw(
            st.sampled_from(
                [
                    {"request": "10s"},
                    {"request": "10s", "backendRequest": "2s"},
                    {"backendRequest": "1m"},
                ]
            )
        )
    if not grpc and draw(st.integers(0, 4)) == 0:
        rule["retry"] = {"codes": [503], "attempts": draw(st.integers(0, 3)), "backoff": "100ms"}
    return rule


def _first_match(spec: dict[str, Any]) -> dict[str, Any]:
    rule = spec["rules"][0]
    rule["matches"] = rule.get("matches") or [{}]
    match: dict[str, Any] = rule["matches"][0]
    return match


_BREAKAGES = [
    # Each breaks one schema or CEL rule, or gives RE2 an expression it refuses (that rule alone is dropped).
    lambda spec: _first_match(spec).update(path={"type": "PathPrefix", "value": "a"}),
    lambda spec: _first_match(spec).update(path={"type": "Exact", "value": "/a//b"}),
    lambda spec: _first_match(spec).update(path={"type": "Glob", "value": "/a"}),
    lambda spec: _first_match(spec).update(path={"type": "RegularExpression", "value": "/(a)\\1"}),
    lambda spec: _first_match(spec).update(
        headers=[{"type": "RegularExpression", "name": "x", "value": "(x"}]
    ),
    lambda spec: _first_match(spec).update(method="FETCH"),
    lambda spec: spec.update(hostnames=["api.*.example.com"]),
    lambda spec: spec.update(hostnames=["10.0.0.1"]),
    lambda spec: spec.update(rules=spec["rules"] * 17),
    lambda spec: spec["rules"][0].update(backendRefs=[_backend("web", weight=-1)]),
    lambda spec: spec["rules"][0].update(backendRefs=[_backend("web", weight=1_000_001)]),
    lambda spec: spec["rules"][0].update(backendRefs=[{"name": "web"}]),
    lambda spec: spec["rules"][0].update(
        filters=[{"type": "RequestRedirect", "requestRedirect": {"statusCode": 304}}]
    ),
    lambda spec: spec["rules"][0].update(filters=[{"type": "RequestHeaderModifier"}]),
    lambda spec: spec["rules"][0].update(timeouts={"request": "1s", "backendRequest": "2s"}),
]


def _parent_identity(item: Any) -> tuple[str, str]:
    return (item["name"], item.get("sectionName", ""))


@st.composite
def routes(draw: st.DrawFn) -> KubeObject:
    """An HTTPRoute or GRPCRoute attached to the edge Gateway and/or a Service."""
    kind = draw(st.sampled_from(["HTTPRoute", "HTTPRoute", "GRPCRoute"]))
    parents = draw(
        st.lists(
            st.sampled_from(
                [
                    EDGE_REF,
                    {**EDGE_REF, "sectionName": "http"},
                    {**EDGE_REF, "sectionName": "other"},
                    {"name": "ghost", "namespace": "edge"},
                    {"name": "foreign", "namespace": "edge"},
                    {"name": "edge-2", "namespace": "edge"},
                    {**SERVICE_REF, "name": "web", "namespace": "default"},
                    {**SERVICE_REF, "name": "api", "namespace": "default"},
                    {**SERVICE_REF, "name": "nowhere", "namespace": "default"},
                ]
            ),
            min_size=1,
            max_size=2,
            unique_by=_parent_identity,
        )
    )
    spec: dict[str, Any] = {"parentRefs": parents}
    if draw(st.booleans()):
        spec["hostnames"] = draw(st.lists(_hostnames, max_size=2, unique=True))
    spec["rules"] = draw(st.lists(_rule(grpc=kind == "GRPCRoute"), max_size=4))
    if spec["rules"] and draw(st.integers(0, 4)) == 0:
        draw(st.sampled_from(_BREAKAGES))(spec)
    meta = ObjectMeta(
        kind=kind,
        namespace=draw(_namespaces),
        name=draw(_route_names),
        generation=draw(st.integers(1, 3)),
        creation_timestamp=draw(_timestamps),
    )
    return KubeObject(meta=meta, spec_json=canonical_json(spec))


@st.composite
def l4_routes(draw: st.DrawFn) -> KubeObject:
    """A GAMMA L4 route: a TCPRoute or TLSRoute (now and then a UDPRoute, refused) whose parents are Services,
    sending to TCP services (`tcp`), HTTP ones, or none."""
    kind = draw(st.sampled_from(["TCPRoute", "TCPRoute", "TLSRoute", "UDPRoute"]))
    parents = draw(
        st.lists(
            st.sampled_from(
                [
                    {"group": "", "kind": "Service", "name": "web", "namespace": "default"},
                    {**SERVICE_REF, "name": "web", "namespace": "default"},
                    {**SERVICE_REF, "name": "api", "namespace": "default"},
                    {**SERVICE_REF, "name": "api", "namespace": "default", "port": 81},
                ]
            ),
            min_size=1,
            max_size=2,
            unique_by=lambda item: (item["name"], item.get("port", 0)),
        )
    )
    return _l4_route(draw, kind, parents, backends=["tcp", "tcp", "v1", "missing"], max_backends=3)


def _l4_route(
    draw: st.DrawFn, kind: str, parents: list[dict[str, Any]], *, backends: list[str], max_backends: int
) -> KubeObject:
    """An L4 route of `kind` in `default` attached to `parents`, with up to `max_backends` of `backends`."""
    refs = st.builds(_backend, st.sampled_from(backends), weight=st.sampled_from([None, 0, 2]))
    spec: dict[str, Any] = {
        "parentRefs": parents,
        "rules": [{"backendRefs": draw(st.lists(refs, max_size=max_backends))}],
    }
    if kind == "TLSRoute":
        spec["hostnames"] = draw(st.lists(_hostnames, min_size=1, max_size=2, unique=True))
    meta = ObjectMeta(
        kind=kind,
        namespace="default",
        name=draw(_route_names),
        generation=draw(st.integers(1, 3)),
        creation_timestamp=draw(_timestamps),
    )
    return KubeObject(meta=meta, spec_json=canonical_json(spec))


@st.composite
def gateways(draw: st.DrawFn) -> KubeObject:
    """A Gateway of the edge's class (replacing the base one or beside it), sometimes invalid."""
    listeners = [
        {"name": "http", "port": 8080, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}
    ]
    extra = draw(
        st.lists(
            st.sampled_from(
                [
                    {
                        "name": "wild",
                        "port": 8080,
                        "protocol": "HTTP",
                        "hostname": "*.example.com",
                        "allowedRoutes": {"namespaces": {"from": "All"}},
                    },
                    {"name": "a", "port": 8080, "protocol": "HTTP", "hostname": "a.example.com"},
                    {"name": "tcp", "port": 8080, "protocol": "TCP"},
                    {
                        "name": "secure",
                        "port": 8443,
                        "protocol": "HTTPS",
                        "tls": {"certificateRefs": [{"name": "cert"}]},
                    },
                    {"name": "bad", "port": 9000, "protocol": "TCP", "hostname": "x.example.com"},
                ]
            ),
            max_size=3,
            unique_by=lambda item: item["name"],
        )
    )
    name, class_name = draw(st.sampled_from([("edge", "aether"), ("edge-2", "aether"), ("foreign", "other")]))
    meta = ObjectMeta(kind="Gateway", namespace="edge", name=name, creation_timestamp=draw(_timestamps))
    return KubeObject(
        meta=meta, spec_json=canonical_json({"gatewayClassName": class_name, "listeners": listeners + extra})
    )


@st.composite
def grants(draw: st.DrawFn) -> KubeObject:
    """A ReferenceGrant in `other` letting routes of `default` refer to its Services (sometimes not quite)."""
    kind = draw(st.sampled_from(["HTTPRoute", "GRPCRoute"]))
    spec = {
        "from": [
            {
                "group": "gateway.networking.k8s.io",
                "kind": kind,
                "namespace": draw(st.sampled_from(["default", "team"])),
            }
        ],
        "to": [{"group": "", "kind": "Service", **({"name": "db"} if draw(st.booleans()) else {})}],
    }
    meta = ObjectMeta(kind="ReferenceGrant", namespace="other", name=draw(st.sampled_from(["g1", "g2"])))
    return KubeObject(meta=meta, spec_json=canonical_json(spec))


def base_events() -> list[Event]:
    """The edge's class and Gateway, the Services routes name (each with a ClusterIP), a TCP service's pod on
    node-b, and one client pod on node-a (in a network namespace: GAMMA L4 chains land on its listeners) calling
    web and api."""

    def service(name: str, namespace: str = "default", *, at: int) -> Event:
        meta = ObjectMeta(kind="Service", namespace=namespace, name=name)
        return builders.kube_service_upserted(
            KubeService(
                meta=meta, selector={"app": name}, ports=[ServicePort(port=80)], cluster_ip=f"10.96.0.{at}"
            )
        )

    client = builders.make_pod(
        "client-0",
        service_account="client",
        node_name="node-a",
        ips=("10.0.0.5",),
        netns="/var/run/netns/client-0",
        annotations={"config.aether.io/upstreams": "web, api"},
    )
    tcp = builders.make_pod(
        "tcp-0",
        service_account="tcp",
        node_name="node-b",
        ips=("10.0.1.5",),
        labels={"app": "tcp", "aether.io/managed": "true"},
        annotations={"endpoint.aether.io/protocol": "tcp"},
    )
    return [
        *edge_gateway_events(),
        *(service(name, at=at) for at, name in enumerate((*SERVICES, "tcp"), start=1)),
        service("db", "other", at=100),
        builders.pod_added(client),
        builders.pod_added(tcp),
    ]


def _other_class(name: str) -> Event:
    """The GatewayClass `name` of another controller (taking the edge's class away when it is `aether`)."""
    return builders.gateway_object_upserted(
        gateway_api_object("GatewayClass", name, {"controllerName": "example.com/other"})
    )


def gateway_events() -> st.SearchStrategy[Event]:
    """Events that change the Gateway API objects: routes upserted (mostly), deleted, gateways and grants."""
    return st.one_of(
        routes().map(builders.gateway_object_upserted),
        routes().map(builders.gateway_object_upserted),
        routes().map(lambda item: builders.gateway_object_deleted(item.meta)),
        l4_routes().map(builders.gateway_object_upserted),
        gateways().map(builders.gateway_object_upserted),
        grants().map(builders.reference_grant_upserted),
        gateways().map(lambda item: builders.gateway_object_deleted(item.meta)),
        st.sampled_from(["aether", "other"]).map(_other_class),
    )


@st.composite
def tied_routes(draw: st.DrawFn) -> list[Event]:
    """Routes whose matches rank equally (same path length, as many headers), on the edge and on one service:
    only the tie-breakers (age, namespace/name, rule and match order) order them."""
    events: list[Event] = []
    parents = draw(st.sampled_from([[EDGE_REF], [{**SERVICE_REF, "name": "web", "namespace": "default"}]]))
    for _ in range(draw(st.integers(2, 4))):
        rules = [
            {
                "matches": [
                    {
                        "path": {"type": "PathPrefix", "value": draw(st.sampled_from(["/a", "/b", "/c"]))},
                        "headers": [{"name": draw(st.sampled_from(["x-a", "x-b"])), "value": "1"}],
                    }
                    for _ in range(draw(st.integers(1, 2)))
                ],
                "backendRefs": [_backend(draw(st.sampled_from(SERVICES)))],
            }
            for _ in range(draw(st.integers(1, 2)))
        ]
        meta = ObjectMeta(
            kind="HTTPRoute",
            namespace=draw(_namespaces),
            name=draw(_route_names),
            creation_timestamp=draw(_timestamps),
        )
        spec = {"parentRefs": parents, "rules": rules}
        events.append(builders.gateway_object_upserted(KubeObject(meta=meta, spec_json=canonical_json(spec))))
    return events


# --- the edge: every listener protocol, certificates, L4 routes, backends' endpoints, identity, MeshConfig ---

_ALL_NAMESPACES = {"namespaces": {"from": "All"}}
EDGE_LISTENERS = (
    {
        "name": "wild",
        "port": 8080,
        "protocol": "HTTP",
        "hostname": "*.example.com",
        "allowedRoutes": _ALL_NAMESPACES,
    },
    {"name": "plain", "port": 8081, "protocol": "HTTP", "allowedRoutes": _ALL_NAMESPACES},
    *(
        {
            "name": f"secure-{index}",
            "port": 8443,
            "protocol": "HTTPS",
            **({"hostname": hostname} if hostname else {}),
            "tls": {"certificateRefs": [{"name": certificate}]},
            "allowedRoutes": _ALL_NAMESPACES,
        }
        for index, (hostname, certificate) in enumerate(
            [
                ("a.example.com", "cert-a"),
                ("*.example.com", "cert-b"),
                ("", "cert-a"),
                ("b.example.com", "gone"),
            ]
        )
    ),
    {
        "name": "passthrough",
        "port": 9443,
        "protocol": "TLS",
        "tls": {"mode": "Passthrough"},
        "allowedRoutes": _ALL_NAMESPACES,
    },
    {
        "name": "terminate",
        "port": 9444,
        "protocol": "TLS",
        "hostname": "a.example.com",
        "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cert-b"}]},
        "allowedRoutes": {**_ALL_NAMESPACES, "kinds": [{"kind": "TCPRoute"}]},
    },
    {"name": "tcp", "port": 9000, "protocol": "TCP", "allowedRoutes": _ALL_NAMESPACES},
    {"name": "udp", "port": 5353, "protocol": "UDP", "allowedRoutes": _ALL_NAMESPACES},
)
"""Listeners the edge Gateway may have beside its HTTP one: a wildcard HTTP listener on its port, another HTTP
port, HTTPS chains on one port (two certificates, a catch-all one, one whose Secret never exists), TLS
passthrough and termination, TCP and UDP."""
EDGE_CERTIFICATES = ("cert-a", "cert-b")
"""The Secrets (namespace `edge`) the HTTPS and TLS listeners name."""
EDGE_SERVICE_ACCOUNTS = ("default/web", "default/api", "default/v1", "default/tcp", "default/shared")
"""Mesh services of the backends the routes name (a Service named like its service account resolves to it;
`shared` runs the pods of Services `v1` and `v2`, once `shared_pods` are added)."""


def _shared_pod(name: str, labels: dict[str, str]) -> Event:
    pod = builders.make_pod(
        name,
        service_account="shared",
        node_name="node-b",
        ips=(f"10.0.3.{len(name)}",),
        labels={"aether.io/managed": "true", **labels},
    )
    return builders.pod_added(pod)


SHARED_PODS = (
    _shared_pod("v1-0", {"app": "v1"}),
    _shared_pod("v2-00", {"app": "v2", "track": "canary"}),
)
"""Pods of service account `shared` that Services `v1` and `v2` select: routes to either go to the cluster of
`default/shared`, subset by the selector's labels (`v2` selects by two labels once `V2_TWO_LABELS`)."""
V2_TWO_LABELS = builders.kube_service_upserted(
    KubeService(
        meta=ObjectMeta(kind="Service", namespace="default", name="v2"),
        selector={"app": "v2", "track": "canary"},
        ports=[ServicePort(port=80)],
        cluster_ip="10.96.0.4",
    )
)


@st.composite
def edge_gateways(draw: st.DrawFn) -> KubeObject:
    """The edge Gateway `edge/edge` with its HTTP listener and some of `EDGE_LISTENERS`."""
    extra = draw(st.lists(st.sampled_from(EDGE_LISTENERS), max_size=5, unique_by=lambda item: item["name"]))
    # Generation 1, the base Gateway's: an older one would be refused as stale.
    meta = ObjectMeta(
        kind="Gateway", namespace="edge", name="edge", generation=1, creation_timestamp="2024-01-01T00:00:00Z"
    )
    spec = {"gatewayClassName": "aether", "listeners": [dict(EDGE_LISTENER), *extra]}
    return KubeObject(meta=meta, spec_json=canonical_json(spec))


@st.composite
def edge_l4_routes(draw: st.DrawFn) -> KubeObject:
    """A TLSRoute, TCPRoute or UDPRoute attached to the edge Gateway, to TCP, HTTP or missing backends."""
    kind = draw(st.sampled_from(["TLSRoute", "TCPRoute", "UDPRoute"]))
    section = draw(st.sampled_from([None, "passthrough", "terminate", "tcp", "udp"]))
    parents = [{**EDGE_REF, **({"sectionName": section} if section else {})}]
    return _l4_route(draw, kind, parents, backends=["tcp", "v1", "missing"], max_backends=2)


def _slice_route(path: str) -> KubeObject:
    """An HTTPRoute of the edge to `legacy`, a Service without a selector (its EndpointSlices are its endpoints)."""
    spec = {
        "parentRefs": [EDGE_REF],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [_backend("legacy")],
            }
        ],
    }
    meta = ObjectMeta(
        kind="HTTPRoute", namespace="default", name="legacy", creation_timestamp="2024-01-01T00:00:00Z"
    )
    return KubeObject(meta=meta, spec_json=canonical_json(spec))


_endpoint_ips = st.sampled_from(["10.0.2.1", "10.0.2.2"])


def _endpoint(draw: st.DrawFn) -> Endpoint:
    service = draw(st.sampled_from(EDGE_SERVICE_ACCOUNTS))
    return builders.make_endpoint(
        draw(_endpoint_ips),
        service=service,
        protocol=Protocol.TCP if service == "default/tcp" else Protocol.HTTP,
        port=draw(st.sampled_from([8080, 9090])),
        labels={"app": service.partition("/")[2], **({"version": "v1"} if draw(st.booleans()) else {})},
    )


@st.composite
def edge_registry_events(draw: st.DrawFn) -> Event:
    """An endpoint of a backend's mesh service added, changed or removed (all at registry version 1)."""
    endpoint = _endpoint(draw)
    make = draw(
        st.sampled_from([builders.endpoint_added, builders.endpoint_updated, builders.endpoint_removed])
    )
    event: Event = make(endpoint)
    return event


EDGE_ID = "spiffe://aether.internal/ns/aether-system/sa/aether-edge"


def edge_events() -> st.SearchStrategy[Event]:
    """What changes the edge snapshot beside routes: its Gateway's listeners, L4 routes, certificates, the
    backends' endpoints, a Service without a selector and its slices, the edge's SVID and bundle, the MeshConfig."""
    certificates = st.sampled_from(EDGE_CERTIFICATES)
    return st.one_of(
        edge_gateways().map(builders.gateway_object_upserted),
        edge_l4_routes().map(builders.gateway_object_upserted),
        edge_l4_routes().map(lambda item: builders.gateway_object_deleted(item.meta)),
        st.builds(
            lambda name, chain: builders.tls_secret_upserted(
                builders.make_tls_secret(name, namespace="edge", cert_chain_pem=chain)
            ),
            certificates,
            st.sampled_from([b"chain-1", b"chain-2"]),
        ),
        certificates.map(
            lambda name: builders.tls_secret_deleted(
                builders.make_meta(name, kind="Secret", namespace="edge")
            )
        ),
        edge_registry_events(),
        edge_registry_events(),
        st.sampled_from(["/legacy", "/old"]).map(
            lambda path: builders.gateway_object_upserted(_slice_route(path))
        ),
        st.just(builders.kube_service_upserted(builders.make_kube_service("legacy", selector={}))),
        st.builds(
            lambda addresses: builders.endpoint_slice_upserted(
                builders.make_endpoint_slice(
                    "legacy-1",
                    namespace="default",
                    service="legacy",
                    addresses=addresses,
                    ports=(("http", 8080),),
                )
            ),
            st.sampled_from([("10.9.0.1",), ("10.9.0.1", "10.9.0.2")]),
        ),
        st.builds(
            lambda chain: builders.svid_rotated(builders.make_svid(EDGE_ID, cert_chain_pem=chain)),
            st.sampled_from([b"svid-1", b"svid-2"]),
        ),
        st.just(builders.trust_bundle_rotated(builders.make_trust_bundle(bundle_pem=b"ca-2"))),
        st.sampled_from([*SHARED_PODS, V2_TWO_LABELS]),
        st.builds(
            lambda domain, tracing: builders.mesh_config_updated(
                builders.make_mesh_config(
                    mesh_domain=domain, tracing_enabled=tracing, trace_sample_per_million=10_000
                )
            ),
            st.sampled_from(["aether.internal", "aether.internal", "mesh.local"]),
            st.booleans(),
        ),
    )


@st.composite
def edge_starts(draw: st.DrawFn) -> list[Event]:
    """A start for the edge: mostly its Gateway with more listeners and their certificates, then any events."""
    events: list[Event] = []
    if draw(st.booleans()):
        events.extend((*SHARED_PODS, V2_TWO_LABELS))
    if draw(st.integers(0, 3)):
        events.append(builders.gateway_object_upserted(draw(edge_gateways())))
        events.extend(
            builders.tls_secret_upserted(builders.make_tls_secret(name, namespace="edge"))
            for name in draw(st.lists(st.sampled_from(EDGE_CERTIFICATES), max_size=2, unique=True))
        )
    events.extend(draw(st.lists(st.one_of(gateway_events(), edge_events(), edge_events()), max_size=12)))
    return events
