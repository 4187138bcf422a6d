"""Tests of `aether render`: manifests in, the projected config (or the status) out, the same bytes every time."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from aether.cli import main
from aether.cli.render_command import REDACTED, Identity, OutputFormat, RenderRequest, render
from aether.envoy.process import find_envoy_binary, open_envoy

APP = """\
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: shop
  labels: {aether.io/managed: "true", app: web}
  annotations: {config.aether.io/upstreams: shop/db}
spec: {nodeName: node-a, serviceAccountName: web}
status: {podIP: 10.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: shop, labels: {aether.io/managed: "true", app: db}}
spec: {nodeName: node-b, serviceAccountName: db}
status: {podIP: 10.0.0.2}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
"""
EDGE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: aether}
spec: {controllerName: gateway.aether.io/edge}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  gatewayClassName: aether
  listeners:
  - name: https
    port: 8443
    protocol: HTTPS
    hostname: shop.example
    tls: {mode: Terminate, certificateRefs: [{name: shop-cert}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: broken, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{matches: [{path: {type: PathPrefix, value: /broken}}], backendRefs: [{name: nowhere, port: 80}]}]
---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {name: shop-cert, namespace: shop}
stringData: {tls.crt: "-----BEGIN CERTIFICATE-----\\nMIIB\\n-----END CERTIFICATE-----\\n", tls.key: "-----BEGIN PRIVATE KEY-----\\nMIIETHEPRIVATEKEYAAA\\n-----END PRIVATE KEY-----\\n"}
---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {name: empty-cert, namespace: shop}
stringData: {tls.crt: CERT}
---
just a string, not an object
"""

HTTP_EDGE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: aether}
spec: {controllerName: gateway.aether.io/edge}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop}
spec:
  gatewayClassName: aether
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
"""


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "app.yaml").write_text(APP)
    (directory / "edge.yaml").write_text(EDGE)
    return directory


def test_a_node_render_holds_the_node_pods_listeners_and_their_upstreams(manifests: Path) -> None:
    """`--node node-a` projects web-1 (on node-a), not db-0, and the cluster of web-1's upstream with db-0 in it."""
    document = json.loads(render(RenderRequest(manifests=manifests, node="node-a")))
    assert document["node"] == "node-a"
    listeners = [item["name"] for item in document["resources"]["listeners"]]
    assert "outbound_http_web-1.shop" in listeners
    assert not [name for name in listeners if "db-0" in name]
    endpoints = {item["cluster_name"]: item for item in document["resources"]["endpoints"]}
    address = endpoints["db.shop.aether.internal"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"] == {"address": "10.0.0.2", "port_value": 18008}
    assert list(document["versions"]) == ["clusters", "endpoints", "listeners", "routes", "secrets"]


def test_the_same_manifests_render_to_the_same_bytes(manifests: Path) -> None:
    """Every format, twice: equal output (nothing reads a clock, every list is ordered)."""
    for request in (
        RenderRequest(manifests=manifests),
        RenderRequest(manifests=manifests, edge=True, output_format=OutputFormat.BOOTSTRAP),
        RenderRequest(manifests=manifests, status=True),
    ):
        assert render(request) == render(request)


def test_an_edge_render_redacts_private_keys_in_json_and_keeps_them_in_the_bootstrap(manifests: Path) -> None:
    """The JSON document is for reading: certificate keys show `<redacted>`; the bootstrap is for running."""
    document = render(RenderRequest(manifests=manifests, edge=True))
    (secret,) = json.loads(document)["resources"]["secrets"]
    assert secret["name"] == "kubernetes://shop/shop-cert"
    assert secret["tls_certificate"]["private_key"] == REDACTED
    assert "THEPRIVATEKEY" not in document
    bootstrap = json.loads(
        render(RenderRequest(manifests=manifests, edge=True, output_format=OutputFormat.BOOTSTRAP))
    )
    (static,) = bootstrap["static_resources"]["secrets"]
    key = b"-----BEGIN PRIVATE KEY-----\nMIIETHEPRIVATEKEYAAA\n-----END PRIVATE KEY-----\n"
    assert static["tls_certificate"]["private_key"] == {"inline_bytes": base64.b64encode(key).decode()}


def test_identity_none_renders_cleartext_http2_upstreams(manifests: Path) -> None:
    """`--identity none`: the edge's backend clusters carry no TLS and speak HTTP/2 to `<pod ip>:18008`."""
    document = json.loads(render(RenderRequest(manifests=manifests, edge=True, identity=Identity.NONE)))
    (cluster,) = [
        item for item in document["resources"]["clusters"] if item["name"] == "web.shop.aether.internal"
    ]
    assert "transport_socket" not in cluster
    options = cluster["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ]
    assert "http2_protocol_options" in options["explicit_http_config"]
    assert document["resources"]["secrets"] == [
        item for item in document["resources"]["secrets"] if item["name"].startswith("kubernetes://")
    ]


def test_status_reports_conditions_rejections_and_skipped_documents(manifests: Path) -> None:
    """`--status`: each object's conditions, the events the reducers rejected, the documents that were skipped."""
    status = yaml.safe_load(render(RenderRequest(manifests=manifests, status=True)))
    broken = status["objects"]["HTTPRoute/shop/broken"]["parents"][0]["conditions"]
    assert {"type": "ResolvedRefs", "status": "False", "reason": "BackendNotFound"}.items() <= next(
        item for item in broken if item["type"] == "ResolvedRefs"
    ).items()
    assert status["rejections"] == [
        {
            "subject": "Secret/shop/empty-cert",
            "reason": "InvalidSpec",
            "message": "Secret/shop/empty-cert: tls.key must not be empty",
        }
    ]
    (skipped,) = status["skipped"]
    assert (skipped["file"], skipped["document"]) == ("edge.yaml", 6)


def test_unreadable_manifests_exit_1_naming_the_file_and_document(
    manifests: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """YAML that does not parse is the only failure: exit 1, the message names file and document index."""
    (manifests / "zz-bad.yaml").write_text("kind: Pod\n---\nkind: [unclosed\n")
    assert main(["render", "--manifests", str(manifests)]) == 1
    error = capsys.readouterr().err
    assert error.startswith("aether render: error: manifest zz-bad.yaml document 1: not YAML (")


def test_the_command_prints_the_render_and_checks_its_address_flags(
    manifests: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`aether render --edge --status` prints the YAML status; a malformed `--admin` is a usage error."""
    assert main(["render", "--manifests", str(manifests), "--edge", "--status"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["skipped"][0]["file"] == "edge.yaml"
    with pytest.raises(SystemExit) as usage:
        main(["render", "--manifests", str(manifests), "--admin", "localhost"])
    assert usage.value.code == 2


def _listeners(manifests: Path, *, capture: bool) -> dict[str, dict[str, object]]:
    document = json.loads(render(RenderRequest(manifests=manifests, node="node-a", capture=capture)))
    return {item["name"]: item["address"]["socket_address"] for item in document["resources"]["listeners"]}


def test_a_node_render_captures_each_pod_as_the_cni_joins_it_in_a_cluster(manifests: Path) -> None:
    """By default a pod is rendered in a network namespace of its own, as the runtime names it (the same path
    every time): its capture listeners are there; `--no-capture` (local mode) binds the pod's IP, no capture."""
    captured = _listeners(manifests, capture=True)
    assert sorted(captured) == [
        "capture_web-1.shop",
        "inbound_web-1.shop",
        "l4_tcp_web-1.shop",
        "outbound_http_web-1.shop",
    ]
    assert (captured["capture_web-1.shop"]["port_value"], captured["l4_tcp_web-1.shop"]["port_value"]) == (
        18001,
        18082,
    )
    namespaces = {address["network_namespace_filepath"] for address in captured.values()}
    assert namespaces == {"/var/run/netns/cni-0bc001f3-d4c0-4096-b145-a2820ffaa7b4"}
    local = _listeners(manifests, capture=False)
    assert local == {
        "inbound_web-1.shop": {"address": "10.0.0.1", "port_value": 18008},
        "outbound_http_web-1.shop": {"address": "10.0.0.1", "port_value": 18081},
    }


def test_a_meshed_pod_without_an_ip_exits_1_naming_the_pod_and_the_fix(
    manifests: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline nothing assigns a pod its IP: a render would leave it out, so it refuses, in one line (an unmeshed
    pod without an IP is no concern of the mesh; `--status` lists the pod's rejection instead)."""
    (manifests / "more.yaml").write_text(
        "kind: Pod\napiVersion: v1\nmetadata: {name: other, namespace: shop}\n---\n"
        "kind: Pod\napiVersion: v1\nmetadata: {name: web-2, namespace: shop, labels: {aether.io/managed: 'true'}}\n"
    )
    for flags in ([], ["--no-capture"], ["--edge"], ["--format", "bootstrap"]):
        assert main(["render", "--manifests", str(manifests), *flags]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert err == (
            "aether render: error: manifest more.yaml document 1: pod shop/web-2 has no IP: set status.podIP in"
            " its manifest (a render has no cluster to assign one)\n"
        )
    assert main(["render", "--manifests", str(manifests), "--status"]) == 0
    assert "has no IP address yet" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("capture", [True, False], ids=["captured", "local-mode"])
def test_a_node_bootstrap_passes_envoy_validation(manifests: Path, tmp_path: Path, capture: bool) -> None:
    """The node's static bootstrap (ODCDS left on ADS towards the agent's socket) passes `envoy --mode validate`,
    its pods captured (each in its namespace) or in local mode."""
    text = render(
        RenderRequest(
            manifests=manifests,
            node="node-a",
            output_format=OutputFormat.BOOTSTRAP,
            admin=("127.0.0.1", 0),
            capture=capture,
        )
    )
    path = tmp_path / "bootstrap.json"
    path.write_text(text)
    result = subprocess.run(
        [str(find_envoy_binary()), "--mode", "validate", "-c", str(path), "-l", "warning"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
async def test_an_edge_bootstrap_with_spiffe_identity_but_no_svid_runs_in_envoy(tmp_path: Path) -> None:
    """Without SVID material the edge's backend clusters wait for their certificate: Envoy runs the bootstrap (it
    used to crash on static clusters taking secrets over ADS) and answers on its admin API."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "app.yaml").write_text(APP)
    (manifests / "edge.yaml").write_text(HTTP_EDGE)
    request = RenderRequest(
        manifests=manifests,
        edge=True,
        output_format=OutputFormat.BOOTSTRAP,
        bind="127.0.31.3",
        admin=("127.0.0.1", 0),
    )
    bootstrap = json.loads(render(request))
    async with open_envoy(
        bootstrap, work_dir=tmp_path / "envoy", wait_live=False, log_level="warning"
    ) as envoy:
        status, _ = await envoy.admin_get("/server_info")
        assert status == 200
        assert envoy.process.returncode is None
