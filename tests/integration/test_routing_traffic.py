"""Routing verified by traffic: Gateway API manifests rendered (edge, identity none) into a static bootstrap, a real
Envoy on it, and h2c backends that answer with their own name: every request must land where the API says.

Backends are pods at 127.0.30.x; the edge dials them at `<pod ip>:18008` in cleartext HTTP/2, as `aether render
--identity none` projects. The manifests go through the same functions as the command (one test runs the command).
"""

from __future__ import annotations

import base64
import collections
import json
import socket
import ssl
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import attrs
import h2.config
import h2.connection
import h2.events
import pytest
import trio

from aether.cli.render_command import (
    Identity,
    OutputFormat,
    RenderRequest,
    bootstrap_document,
    render_snapshot,
    render_state,
)
from aether.envoy.process import find_envoy_binary, open_envoy
from aether.http1 import HttpConnection, HttpResponse, http_get
from aether.identity.mint import MintedSvid, TestCA
from aether.kube.manifests import ManifestDirectory
from aether.testing.envoy import wait_for
from aether.testing.h2c_upstream import (
    ECHO_AUTHORITY_HEADER,
    ECHO_PATH_HEADER,
    H2cUpstream,
    open_h2c_upstream,
)

pytestmark = pytest.mark.slow

LOOPBACK = "127.0.0.1"
EDGE_ADDRESS = "127.0.31.1"
"""Where the edge's listeners bind: an address of its own, so its fixed readiness port (18021) meets no other test."""
BACKENDS = {
    "alpha": "127.0.30.1",
    "beta": "127.0.30.2",
    "gamma": "127.0.30.3",
    "mirror": "127.0.30.4",
    "slow": "127.0.30.5",
}
"""Backend name → pod IP (each listens on `<ip>:18008`, the mesh inbound port)."""
MESH_INBOUND = 18008
SLOW_DELAY = 3.0
"""Seconds the `slow` backend waits before answering: far beyond the routes' timeouts."""
REQUEST_TIMEOUT = 10.0


def _backend_manifests(backends: Mapping[str, str]) -> str:
    documents = []
    for name, ip in backends.items():
        documents.append(
            f"""\
apiVersion: v1
kind: Pod
metadata: {{name: {name}-0, namespace: default, labels: {{app: {name}, aether.io/managed: "true"}}}}
spec: {{serviceAccountName: {name}, nodeName: node-a}}
status: {{podIP: {ip}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{selector: {{app: {name}}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}
"""
        )
    return "---\n".join(documents)


def gateway_manifests(port: int) -> str:
    """The edge's GatewayClass and the Gateway `default/edge` with an HTTP listener on `port` for routes of any
    namespace."""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: aether}}
spec: {{controllerName: gateway.aether.io/edge}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: aether
  listeners:
  - {{name: http, port: {port}, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}
"""


_HANDED_OUT: set[int] = set()
"""Ports `free_port` returned: a test picks two before binding either, and the kernel may offer a released one again."""


def free_port(host: str = EDGE_ADDRESS) -> int:
    while True:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port: int = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


@attrs.frozen(kw_only=True)
class Edge:
    """A running edge Envoy on rendered routes, and its backends."""

    port: int
    backends: Mapping[str, H2cUpstream]


def write_manifests(
    directory: Path, routes: str, *, port: int, backends: Mapping[str, str] = BACKENDS
) -> Path:
    """Write the `backends` (name → pod IP: a Pod and a Service each), the Gateway on `port` and `routes` into
    `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "backends.yaml").write_text(_backend_manifests(backends))
    (directory / "gateway.yaml").write_text(gateway_manifests(port))
    (directory / "routes.yaml").write_text(routes)
    return directory


@asynccontextmanager
async def open_edge(tmp_path: Path, routes: str) -> AsyncIterator[Edge]:
    """Render `routes` (with the backends and Gateway) for the edge, identity none, and run Envoy on it."""
    port = free_port()
    manifests = write_manifests(tmp_path / "manifests", routes, port=port)
    request = RenderRequest(manifests=manifests, edge=True, identity=Identity.NONE, bind=EDGE_ADDRESS)
    snapshot = render_snapshot(render_state(ManifestDirectory.read(manifests)), request)
    bootstrap = bootstrap_document(snapshot, admin=(LOOPBACK, 0))
    async with AsyncExitStack() as stack:
        backends = {
            name: await stack.enter_async_context(
                open_h2c_upstream(
                    name=name, host=ip, port=MESH_INBOUND, delay=SLOW_DELAY if name == "slow" else 0.0
                )
            )
            for name, ip in BACKENDS.items()
        }
        await stack.enter_async_context(
            open_envoy(bootstrap, work_dir=tmp_path / "envoy", log_level="warning")
        )
        yield Edge(port=port, backends=backends)


class Client:
    """HTTP/1.1 requests on one keep-alive connection to the edge listener."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._connection = HttpConnection(stream, client=True, peer="the edge")

    async def request(
        self, path: str, *, host: str, method: str = "GET", headers: Mapping[str, str] | None = None
    ) -> HttpResponse:
        with trio.fail_after(REQUEST_TIMEOUT):
            await self._connection.send_request(
                method, path, headers=[("host", host), ("content-length", "0"), *(headers or {}).items()]
            )
            response = await self._connection.receive_response()
        self._connection.next_cycle()  # a closed one fails the next request, loudly
        return response

    async def landed(self, path: str, *, host: str, **options: object) -> str:
        """Send a request; return the backend that answered it (or `<status>` when Envoy answered itself)."""
        response = await self.request(path, host=host, **options)  # type: ignore[arg-type]
        return response.headers.get("x-upstream-name", f"<{response.status}>")


@asynccontextmanager
async def open_client(edge: Edge) -> AsyncIterator[Client]:
    stream = await trio.open_tcp_stream(EDGE_ADDRESS, edge.port)
    async with stream:
        yield Client(stream)


def http_route(name: str, hostname: str, rules: str) -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [{hostname}]
  rules:
{rules}"""


PRECEDENCE = http_route(
    "precedence",
    "shop.example",
    """\
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: alpha, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{name: beta, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /api/v2}}]
    backendRefs: [{name: gamma, port: 80}]
  - matches: [{path: {type: Exact, value: /api/v2/exact}}]
    backendRefs: [{name: mirror, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /api}, headers: [{name: x-canary, value: "yes"}]}]
    backendRefs: [{name: gamma, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /api}, queryParams: [{name: version, value: "3"}]}]
    backendRefs: [{name: mirror, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /api}, method: DELETE}]
    backendRefs: [{name: slow, port: 80}]
    timeouts: {request: 100ms}
""",
)


async def test_precedence_paths_headers_query_parameters_and_methods(tmp_path: Path) -> None:
    """Exact beats prefix, longer prefixes beat shorter, a method, header or query match beats a bare path; another
    host gets 404 at once."""
    async with open_edge(tmp_path, PRECEDENCE) as edge, open_client(edge) as client:
        host = "shop.example"
        assert await client.landed("/", host=host) == "alpha"
        assert await client.landed("/other", host=host) == "alpha"
        assert await client.landed("/api", host=host) == "beta"
        assert await client.landed("/api/v1", host=host) == "beta"
        assert await client.landed("/apiary", host=host) == "alpha"  # a prefix matches whole path segments
        assert await client.landed("/api/v2/x", host=host) == "gamma"
        assert await client.landed("/api/v2/exact", host=host) == "mirror"
        assert await client.landed("/api/v1", host=host, headers={"x-canary": "yes"}) == "gamma"
        assert await client.landed("/api/v1?version=3", host=host) == "mirror"
        assert await client.landed("/api/v1?version=4", host=host) == "beta"
        assert await client.landed("/api/v1", host=host, method="DELETE") == "<504>"  # slow, past its timeout
        assert await client.landed("/api", host="unknown.example") == "<404>"


WEIGHTS = http_route(
    "weights",
    "weights.example",
    """\
  - backendRefs:
    - {name: alpha, port: 80, weight: 1}
    - {name: beta, port: 80, weight: 3}
    - {name: gamma, port: 80, weight: 0}
""",
)
WEIGHT_REQUESTS = 2_000
WEIGHT_TOLERANCE = 0.05
"""Absolute tolerance on a share: at n = 2,000 and p = 0.25 the standard deviation is ~0.0097, so five of them."""


async def test_weights_split_traffic_in_proportion_and_weight_zero_gets_none(tmp_path: Path) -> None:
    """Weights 1:3:0 over 2,000 requests: shares within 5 points of 25% and 75%, none to the weight-0 backend."""
    async with open_edge(tmp_path, WEIGHTS) as edge, open_client(edge) as client:
        counts = collections.Counter(
            [await client.landed("/", host="weights.example") for _ in range(WEIGHT_REQUESTS)]
        )
    assert set(counts) == {"alpha", "beta"}
    assert abs(counts["alpha"] / WEIGHT_REQUESTS - 0.25) < WEIGHT_TOLERANCE
    assert abs(counts["beta"] / WEIGHT_REQUESTS - 0.75) < WEIGHT_TOLERANCE


FILTERS = http_route(
    "filters",
    "filters.example",
    """\
  - matches: [{path: {type: PathPrefix, value: /old}}]
    filters:
    - type: URLRewrite
      urlRewrite: {hostname: rewritten.example, path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}
    - type: RequestHeaderModifier
      requestHeaderModifier: {add: [{name: x-added, value: "1"}], remove: [x-secret]}
    - type: ResponseHeaderModifier
      responseHeaderModifier: {set: [{name: x-served-by, value: edge}]}
    backendRefs: [{name: alpha, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /moved}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, hostname: elsewhere.example, statusCode: 301}
  - matches: [{path: {type: PathPrefix, value: /found}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /here}, statusCode: 302}
  - matches: [{path: {type: PathPrefix, value: /copied}}]
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: mirror, port: 80}}
    backendRefs: [{name: beta, port: 80}]
""",
)


async def test_rewrites_header_modifiers_redirects_and_mirrors(tmp_path: Path) -> None:
    """URLRewrite changes path and authority, header modifiers apply both ways, redirects answer with their status
    and location, and a mirror gets a copy while the request lands on its backend."""
    async with open_edge(tmp_path, FILTERS) as edge, open_client(edge) as client:
        host = "filters.example"
        rewritten = await client.request("/old/page", host=host, headers={"x-secret": "s"})
        assert rewritten.headers["x-upstream-name"] == "alpha"
        assert (rewritten.headers[ECHO_PATH_HEADER], rewritten.headers[ECHO_AUTHORITY_HEADER]) == (
            "/new/page",
            "rewritten.example",
        )
        assert rewritten.headers["x-served-by"] == "edge"
        received = edge.backends["alpha"].requests[-1]
        assert received.headers.get("x-added") == "1"
        assert "x-secret" not in received.headers

        moved = await client.request("/moved/a", host=host)
        assert moved.status == 301
        assert moved.headers["location"].startswith(
            "https://elsewhere.example"
        )  # no port: see the test below
        found = await client.request("/found/a", host=host)
        assert (found.status, found.headers["location"]) == (302, f"http://{host}:{edge.port}/here")

        assert await client.landed("/copied", host=host) == "beta"
        mirror = edge.backends["mirror"]

        async def mirrored() -> bool:
            return bool(mirror.requests)

        # The mirror's copy is sent beside the request, not before the answer.
        await wait_for(mirrored, timeout=REQUEST_TIMEOUT)
        assert edge.backends["mirror"].requests[0].path == "/copied"


REGEX = http_route(
    "regex",
    "regex.example",
    """\
  - matches: [{path: {type: RegularExpression, value: "/items/[0-9]+"}}]
    backendRefs: [{name: alpha, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /items}, headers: [{type: RegularExpression, name: x-tier, value: "gold|platinum"}]}]
    backendRefs: [{name: beta, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /items}, queryParams: [{type: RegularExpression, name: sort, value: "^(asc|desc)$"}]}]
    backendRefs: [{name: gamma, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /replaced}}}]
    backendRefs: [{name: alpha, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /slow}}]
    timeouts: {request: 2s, backendRequest: 100ms}
    backendRefs: [{name: slow, port: 80}]
""",
)


async def test_regular_expressions_full_path_rewrites_and_backend_request_timeouts(tmp_path: Path) -> None:
    """Regex path, header and query matches route by pattern; ReplaceFullPath replaces the whole path; a
    backendRequest timeout shorter than the backend's answer gives 504."""
    async with open_edge(tmp_path, REGEX) as edge, open_client(edge) as client:
        host = "regex.example"
        assert await client.landed("/items/42", host=host) == "alpha"
        assert await client.landed("/items/x", host=host) == "<404>"
        assert await client.landed("/items/x", host=host, headers={"x-tier": "gold"}) == "beta"
        assert await client.landed("/items/x", host=host, headers={"x-tier": "silver"}) == "<404>"
        assert await client.landed("/items/x?sort=desc", host=host) == "gamma"
        assert await client.landed("/items/x?sort=random", host=host) == "<404>"
        rewritten = await client.request("/full/a/b?q=1", host=host)
        assert rewritten.headers[ECHO_PATH_HEADER] == "/replaced?q=1"
        assert await client.landed("/slow", host=host) == "<504>"


GRPC = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: edge}]
  hostnames: [mixed.example]
  rules:
  - matches: [{method: {service: shop.v1.Cart, method: Add}}]
    backendRefs: [{name: alpha, port: 80}]
  - matches: [{method: {type: RegularExpression, service: 'shop\\.v1\\..*', method: "Get.*"}}]
    backendRefs: [{name: beta, port: 80}]
---
""" + http_route(
    "http",
    "mixed.example",
    """\
  - backendRefs: [{name: gamma, port: 80}]
""",
)


async def test_grpc_routes_match_service_and_method_and_are_never_merged_with_http_routes(
    tmp_path: Path,
) -> None:
    """On one host, gRPC requests match the GRPCRoute by service and method (exact, regex); the same paths without
    gRPC's content type go to the HTTPRoute; the readiness port answers beside them."""
    grpc = {"content-type": "application/grpc", "te": "trailers"}
    async with open_edge(tmp_path, GRPC) as edge, open_client(edge) as client:
        host = "mixed.example"
        assert await client.landed("/shop.v1.Cart/Add", host=host, method="POST", headers=grpc) == "alpha"
        assert await client.landed("/shop.v1.Cart/GetAll", host=host, method="POST", headers=grpc) == "beta"
        assert await client.landed("/shop.v1.Cart/Add", host=host, method="POST") == "gamma"
        assert await client.landed("/other", host=host) == "gamma"
        ready = await http_get(EDGE_ADDRESS, 18021, "/aether/readyz")
        assert (ready.status, ready.body) == (200, b"ready\n")


async def test_a_scheme_redirect_to_https_leaves_the_default_port_out(tmp_path: Path) -> None:
    """A RequestRedirect to https without a port answers `https://<host>/<path>` (no `:443`)."""
    async with open_edge(tmp_path, FILTERS) as edge, open_client(edge) as client:
        moved = await client.request("/moved/a", host="filters.example")
    assert (moved.status, moved.headers["location"]) == (301, "https://elsewhere.example/moved/a")


REDIRECT_PORTS = http_route(
    "ports",
    "ports.example",
    """\
  - matches: [{path: {type: PathPrefix, value: /host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: other.example}}]
  - matches: [{path: {type: PathPrefix, value: /secure}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /path}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /here}}}]
  - matches: [{path: {type: PathPrefix, value: /explicit}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: other.example, port: 8443}}]
""",
)


async def test_redirect_ports_follow_the_listener_and_the_scheme_never_the_host_header(
    tmp_path: Path,
) -> None:
    """On a listener that is not on 80: a redirect to a hostname keeps the listener's port, a scheme change takes
    the scheme's well-known port (left out), and neither depends on whether the client wrote a port in Host."""
    async with open_edge(tmp_path, REDIRECT_PORTS) as edge, open_client(edge) as client:
        for host in ("ports.example", f"ports.example:{edge.port}"):
            locations = [
                (await client.request(path, host=host)).headers["location"]
                for path in ("/host", "/secure", "/path", "/explicit")
            ]
            assert locations == [
                f"http://other.example:{edge.port}/host",
                "https://ports.example/secure",
                f"http://ports.example:{edge.port}/here",
                "http://other.example:8443/explicit",
            ], host


def test_the_render_command_prints_a_bootstrap_envoy_accepts(tmp_path: Path) -> None:
    """`aether render --edge --identity none --format bootstrap` prints the same bytes twice, and Envoy accepts
    them (`--mode validate`)."""
    manifests = write_manifests(tmp_path / "manifests", PRECEDENCE, port=18480)
    command = [sys.executable, "-m", "aether.cli", "render", "--manifests", str(manifests), "--edge"]
    command += ["--identity", "none", "--format", str(OutputFormat.BOOTSTRAP), "--bind", EDGE_ADDRESS]
    first = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    second = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    assert first.stdout == second.stdout
    listeners = json.loads(first.stdout)["static_resources"]["listeners"]
    assert [item["name"] for item in listeners] == ["edge_18480", "edge_readiness"]
    path = tmp_path / "bootstrap.json"
    path.write_text(first.stdout)
    result = subprocess.run(
        [str(find_envoy_binary()), "--mode", "validate", "-c", str(path), "-l", "warning"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- TLS at the edge: certificates selected by SNI, and passthrough ---

SHOP_ID = "spiffe://certs.example/shop"
API_ID = "spiffe://certs.example/api"


def _tls_secret(name: str, minted: MintedSvid) -> str:
    return f"""\
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {{name: {name}, namespace: default}}
data:
  tls.crt: {base64.b64encode(minted.cert_chain_pem).decode()}
  tls.key: {base64.b64encode(minted.private_key_pem).decode()}
"""


def _https_gateway(port: int, passthrough_port: int) -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: secure, namespace: default}}
spec:
  gatewayClassName: aether
  listeners:
  - name: shop
    port: {port}
    protocol: HTTPS
    hostname: shop.example
    tls: {{mode: Terminate, certificateRefs: [{{name: shop-cert}}]}}
  - name: api
    port: {port}
    protocol: HTTPS
    hostname: api.example
    tls: {{mode: Terminate, certificateRefs: [{{name: api-cert}}]}}
  - name: pass
    port: {passthrough_port}
    protocol: TLS
    tls: {{mode: Passthrough}}
    allowedRoutes: {{kinds: [{{kind: TLSRoute}}]}}
"""


TLS_BACKENDS = {"vault": "127.0.30.6", "ledger": "127.0.30.7"}
"""Backends that speak TLS themselves (TCP endpoints, reached through passthrough)."""


def _passthrough_manifests() -> str:
    documents = []
    for name, ip in TLS_BACKENDS.items():
        documents.append(
            f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}-0
  namespace: default
  labels: {{app: {name}, aether.io/managed: "true"}}
  annotations: {{endpoint.aether.io/protocol: tcp, endpoint.aether.io/port: "8443"}}
spec: {{serviceAccountName: {name}}}
status: {{podIP: {ip}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{selector: {{app: {name}}}, ports: [{{port: 8443}}]}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: to-{name}, namespace: default}}
spec:
  parentRefs: [{{name: secure, sectionName: pass}}]
  hostnames: [{name}.example]
  rules: [{{backendRefs: [{{name: {name}, port: 8443}}]}}]
"""
        )
    return "---\n".join(documents)


def _client_context(ca: TestCA) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.bundle_pem.decode())
    context.check_hostname = (
        False  # the certificates name SPIFFE IDs, not DNS names: the test reads the URI SAN
    )
    return context


def _uri_san(stream: trio.SSLStream[trio.SocketStream]) -> str:
    certificate = stream.getpeercert()
    assert certificate is not None
    return str(next(value for kind, value in certificate["subjectAltName"] if kind == "URI"))


async def _tls_handshake(
    port: int, server_name: str, context: ssl.SSLContext
) -> trio.SSLStream[trio.SocketStream]:
    stream = trio.SSLStream(
        await trio.open_tcp_stream(EDGE_ADDRESS, port), context, server_hostname=server_name
    )
    await stream.do_handshake()
    return stream


async def _serve_tls_backend(
    name: str,
    minted: MintedSvid,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A TLS backend at the pod's mesh inbound that names itself over the connection (passthrough's far end)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:
        chain, key = Path(directory) / "chain.pem", Path(directory) / "key.pem"
        chain.write_bytes(minted.cert_chain_pem)
        key.write_bytes(minted.private_key_pem)
        context.load_cert_chain(chain, key)

    async def answer(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, context, server_side=True)
        try:
            await tls.send_all(f"{name}\n".encode())
            await tls.aclose()
        except trio.BrokenResourceError:
            return

    listeners = await trio.open_tcp_listeners(MESH_INBOUND, host=TLS_BACKENDS[name])
    await trio.serve_listeners(answer, listeners, task_status=task_status)


def _secure_route(name: str, hostname: str, backend: str) -> str:
    """An HTTPRoute of `hostname` to `backend` on the Gateway `secure`."""
    return http_route(name, hostname, f"  - backendRefs: [{{name: {backend}, port: 80}}]\n").replace(
        "parentRefs: [{name: edge}]", "parentRefs: [{name: secure}]"
    )


def _https_manifests(ca: TestCA, port: int, passthrough_port: int, *more: str) -> str:
    """The Gateway `secure` (HTTPS shop.example and api.example on `port`, each with its certificate from `ca`,
    passthrough on `passthrough_port`), a route of shop.example to alpha, and `more` documents."""
    return "---\n".join(
        [
            _https_gateway(port, passthrough_port),
            _tls_secret("shop-cert", ca.issue(SHOP_ID)),
            _tls_secret("api-cert", ca.issue(API_ID)),
            _secure_route("shop", "shop.example", "alpha"),
            *more,
        ]
    )


async def test_https_serves_the_certificate_of_each_hostname_and_passthrough_routes_by_sni(
    tmp_path: Path,
) -> None:
    """HTTPS listeners on one port: SNI `shop.example` gets the shop certificate, `api.example` the api one, and
    the request inside is routed; on the passthrough port the client's TLS reaches the backend its SNI names."""
    ca = TestCA("certs.example")
    port, passthrough_port = free_port(), free_port()
    routes = _https_manifests(ca, port, passthrough_port, _passthrough_manifests())
    context = _client_context(ca)
    async with open_edge(tmp_path, routes), trio.open_nursery() as nursery:
        backend_ca = TestCA("backends.example")
        for name in TLS_BACKENDS:
            await nursery.start(
                _serve_tls_backend, name, backend_ca.issue(f"spiffe://backends.example/{name}")
            )

        async with await _tls_handshake(port, "api.example", context) as stream:
            assert _uri_san(stream) == API_ID
        async with await _tls_handshake(port, "shop.example", context) as stream:
            assert _uri_san(stream) == SHOP_ID
            client = Client(stream)
            response = await client.request("/", host="shop.example")
            assert (response.status, response.headers["x-upstream-name"]) == (200, "alpha")

        backend_context = _client_context(backend_ca)
        for name in TLS_BACKENDS:
            async with await _tls_handshake(passthrough_port, f"{name}.example", backend_context) as stream:
                assert _uri_san(stream) == f"spiffe://backends.example/{name}"
                assert await stream.receive_some(100) == f"{name}\n".encode()
        nursery.cancel_scope.cancel()


async def test_a_request_for_a_host_another_chain_serves_is_misdirected(tmp_path: Path) -> None:
    """On a connection whose SNI chose the shop certificate, a request for api.example (which the api listener
    serves with its own certificate) is answered 421 and never routed; shop.example is routed, an unknown host 404."""
    ca = TestCA("certs.example")
    port, passthrough_port = free_port(), free_port()
    routes = _https_manifests(ca, port, passthrough_port, _secure_route("api", "api.example", "beta"))
    async with open_edge(tmp_path, routes) as edge:
        async with await _tls_handshake(port, "shop.example", _client_context(ca)) as stream:
            client = Client(stream)
            assert await client.landed("/", host="shop.example") == "alpha"
            assert await client.landed("/", host="api.example") == "<421>"
            assert await client.landed("/", host="unknown.example") == "<404>"
        h2_context = _client_context(ca)
        h2_context.set_alpn_protocols(["h2"])
        async with await _tls_handshake(port, "shop.example", h2_context) as stream:
            assert stream.selected_alpn_protocol() == "h2"
            assert await _h2_statuses(stream, ("shop.example", "api.example")) == [200, 421]
        assert not edge.backends["beta"].requests


async def _h2_statuses(stream: trio.SSLStream[trio.SocketStream], authorities: Sequence[str]) -> list[int]:
    """Send a GET for each of `authorities` on one HTTP/2 connection, one after the other; return the statuses."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    await stream.send_all(connection.data_to_send())
    statuses = []
    with trio.fail_after(REQUEST_TIMEOUT):
        for authority in authorities:
            stream_id = connection.get_next_available_stream_id()
            headers = [(":method", "GET"), (":scheme", "https"), (":authority", authority), (":path", "/")]
            connection.send_headers(stream_id, headers, end_stream=True)
            await stream.send_all(connection.data_to_send())
            status = 0
            ended = False
            while not ended:
                data = await stream.receive_some(65536)
                assert data, "the edge closed the HTTP/2 connection"
                for event in connection.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                        status = int(dict(event.headers)[b":status"])
                    elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                        ended = True
                await stream.send_all(connection.data_to_send())
            statuses.append(status)
    return statuses


def _invalid_certificate_gateway(port: int) -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: secure, namespace: default}}
spec:
  gatewayClassName: aether
  listeners:
  - {{name: shop, port: {port}, protocol: HTTPS, hostname: shop.example, tls: {{certificateRefs: [{{name: shop-cert}}]}}}}
  - {{name: bad, port: {port}, protocol: HTTPS, hostname: bad.example, tls: {{certificateRefs: [{{name: bad-cert}}]}}}}
  - {{name: gone, port: {port}, protocol: HTTPS, hostname: gone.example, tls: {{certificateRefs: [{{name: no-cert}}]}}}}
---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {{name: bad-cert, namespace: default}}
data: {{tls.crt: Zm9vCg==, tls.key: YmFyCg==}}
"""


async def test_listeners_whose_certificate_is_missing_or_malformed_are_left_out_and_the_rest_serve(
    tmp_path: Path,
) -> None:
    """Beside a listener whose Secret is not a PEM pair and one whose Secret does not exist, the listener with a
    good certificate serves: Envoy loads the edge (a malformed chain would make it refuse the whole bootstrap), and
    a client naming either broken host gets no TLS at all."""
    ca = TestCA("certs.example")
    port = free_port()
    routes = "---\n".join(
        [
            _invalid_certificate_gateway(port),
            _tls_secret("shop-cert", ca.issue(SHOP_ID)),
            http_route("shop", "shop.example", "  - backendRefs: [{name: alpha, port: 80}]\n").replace(
                "parentRefs: [{name: edge}]", "parentRefs: [{name: secure}]"
            ),
        ]
    )
    context = _client_context(ca)
    async with open_edge(tmp_path, routes):
        async with await _tls_handshake(port, "shop.example", context) as stream:
            assert _uri_san(stream) == SHOP_ID
            response = await Client(stream).request("/", host="shop.example")
            assert (response.status, response.headers["x-upstream-name"]) == (200, "alpha")
        for server_name in ("bad.example", "gone.example"):
            with pytest.raises((trio.BrokenResourceError, ssl.SSLError)):
                await _tls_handshake(port, server_name, context)


LONG_NAME = "edge-with-a-name-of-253-characters-" + "a" * 218
"""A valid Kubernetes object name of the greatest length, without a dot (no label limit of 63 applies)."""


async def test_a_gateway_and_route_named_with_253_characters_route_traffic(tmp_path: Path) -> None:
    """A Gateway and an HTTPRoute whose names are 253 characters long are served like any other."""
    assert len(LONG_NAME) == 253
    port = free_port()
    routes = f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {LONG_NAME}, namespace: default}}
spec:
  gatewayClassName: aether
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
""" + http_route(LONG_NAME, "long.example", "  - backendRefs: [{name: beta, port: 80}]\n").replace(
        "parentRefs: [{name: edge}]", f"parentRefs: [{{name: {LONG_NAME}}}]"
    )
    async with open_edge(tmp_path, routes) as edge, open_client(attrs.evolve(edge, port=port)) as client:
        assert await client.landed("/", host="long.example") == "beta"


async def test_a_gateway_whose_parameters_ref_cannot_be_resolved_serves_nothing(tmp_path: Path) -> None:
    """A Gateway naming infrastructure parameters the edge cannot read is not accepted: its port takes no
    connection, while the other Gateway's routes are served."""
    port = free_port()
    routes = f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: tuned, namespace: default}}
spec:
  gatewayClassName: aether
  infrastructure: {{parametersRef: {{group: example.com, kind: EdgeParameters, name: missing}}}}
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
""" + http_route("both", "both.example", "  - backendRefs: [{name: gamma, port: 80}]\n").replace(
        "parentRefs: [{name: edge}]", "parentRefs: [{name: edge}, {name: tuned}]"
    )
    async with open_edge(tmp_path, routes) as edge, open_client(edge) as client:
        assert await client.landed("/", host="both.example") == "gamma"
        with pytest.raises(OSError, match="all attempts to connect"):
            await trio.open_tcp_stream(EDGE_ADDRESS, port)


RETRIES = http_route(
    "retries",
    "retries.example",
    """\
  - matches: [{path: {type: PathPrefix, value: /bounded}}]
    retry: {attempts: 2}
    timeouts: {request: 8s, backendRequest: 300ms}
    backendRefs: [{name: alpha, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /attempts}}]
    retry: {attempts: 2}
    timeouts: {backendRequest: 300ms}
    backendRefs: [{name: beta, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /reset}}]
    retry: {attempts: 2}
    backendRefs: [{name: gamma, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /no-retry}}]
    backendRefs: [{name: mirror, port: 80}]
""",
)


async def test_per_try_timeouts_and_resets_after_the_request_was_sent_are_retried(tmp_path: Path) -> None:
    """backendRequest bounds each attempt: an attempt past it is retried while the request timeout lasts (or, without
    one, while attempts remain); a stream reset after the backend received the request is retried when the rule
    asks for retries, and answered 503 when it does not."""
    async with open_edge(tmp_path, RETRIES) as edge, open_client(edge) as client:
        host = "retries.example"
        for name, path in (("alpha", "/bounded"), ("beta", "/attempts")):
            edge.backends[name].answer_delays = [SLOW_DELAY]
            assert await client.landed(path, host=host) == name
            assert len(edge.backends[name].requests) == 2, name  # the slow attempt, then the retry
        edge.backends["gamma"].resets = 1
        assert await client.landed("/reset", host=host) == "gamma"
        assert len(edge.backends["gamma"].requests) == 2
        edge.backends["mirror"].resets = 1
        assert await client.landed("/no-retry", host=host) == "<503>"
