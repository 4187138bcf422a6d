"""kubectl as a real client: `kubectl apply` a Gateway and an HTTPRoute to the standalone test API server, run
`aether controller` on it, and `kubectl get httproute -o yaml` shows the status the controller wrote; the same
process serves the admission webhooks the test server calls, and projects the MeshConfig kubectl applies."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from aether.core.gateway import EDGE_CONTROLLER
from aether.testing.xds_resources import pick_free_port
from tests.manifests.test_apply import KUBECONFIG, kube_api
from tests.needs import needs

pytestmark = needs("kubectl")

__all__ = ["kube_api"]

GATEWAY_OBJECTS = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: aether}}
spec: {{controllerName: {EDGE_CONTROLLER}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: edge}}
spec:
  gatewayClassName: aether
  listeners: [{{name: http, port: 8080, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}]
"""
OBJECTS = f"""{GATEWAY_OBJECTS}---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec: {{selector: {{app: web}}, ports: [{{port: 80}}], clusterIP: 10.96.0.20}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: shop}}
spec:
  parentRefs: [{{name: edge, namespace: edge}}]
  rules: [{{backendRefs: [{{name: web, port: 80}}]}}]
"""
WAIT = 60.0
WEBHOOKS = Path(__file__).parents[2] / "manifests" / "base" / "webhooks.yaml"


def _run(kubeconfig: Path, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _kubectl(kubeconfig: Path, *argv: str, stdin: str | None = None) -> str:
    done = _run(kubeconfig, *argv, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kubectl_get_shows_the_status_the_controller_wrote(kube_api: str, tmp_path: Path) -> None:
    """The route's parent entry under gateway.aether.io/edge, Accepted and ResolvedRefs, as kubectl reads it."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(url=kube_api))
    _kubectl(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=OBJECTS)
    controller = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "aether.cli",
                "controller",
                "--kube-api",
                kube_api,
                "--pod-name",
                "controller-0",
            ),
            *("--lease-duration", "2", "--renew-deadline", "1.5", "--retry-period", "0.2"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + WAIT
        status: dict[str, Any] = {}
        while not status.get("parents"):
            assert time.monotonic() < deadline, "no status written"
            assert controller.poll() is None, controller.stderr.read() if controller.stderr else ""
            route = yaml.safe_load(
                _kubectl(kubeconfig, "get", "httproute", "web", "-n", "shop", "-o", "yaml")
            )
            status = route.get("status") or {}
        parents: list[dict[str, Any]] = status["parents"]
        [parent] = parents
        assert parent["controllerName"] == EDGE_CONTROLLER
        assert [(c["type"], c["status"]) for c in parent["conditions"]] == [
            ("Accepted", "True"),
            ("ResolvedRefs", "True"),
        ]
        lease = yaml.safe_load(
            _kubectl(kubeconfig, "get", "lease", "aether-controller", "-n", "aether-system", "-o", "yaml")
        )
        assert lease["spec"]["holderIdentity"] == "controller-0"
    finally:
        controller.terminate()
        controller.wait(timeout=10)


BAD_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad, namespace: shop}
spec:
  parentRefs: [{name: edge, namespace: edge}]
  rules: [{matches: [{path: {type: RegularExpression, value: "/(unclosed"}}]}]
"""
MESH_CONFIG = """
apiVersion: config.aether.io/v1
kind: MeshConfig
metadata: {name: default, namespace: aether-system}
spec: {meshDomain: corp.mesh, trustDomain: corp.example, proxy: {tracingEnabled: true}}
"""
MESHED_POD = """
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {aether.io/managed: "true"}}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: shop}
spec: {containers: [{name: web, image: "web:1"}]}
"""


def test_the_controller_process_serves_webhooks_and_projects_the_mesh_config(tmp_path: Path) -> None:
    """`aether controller` as deployed (generated certificate, caBundle written) behind the standalone test API
    server: kubectl's route with an uncompilable regex is denied with the core's message, the MeshConfig kubectl
    applies comes back as the ConfigMap the agent and the edge mount, and a pod created then gets the init check
    expecting that MeshConfig's trust domain."""
    webhook_port = pick_free_port()
    api = subprocess.Popen(
        [
            *(sys.executable, "-m", "aether.testing.kubeapi", "--listen", "127.0.0.1:0"),
            f"--webhook-service=aether-system/aether-controller:443=127.0.0.1:{webhook_port}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    controller: subprocess.Popen[str] | None = None
    try:
        assert api.stdout is not None
        url = api.stdout.readline().strip()
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(KUBECONFIG.format(url=url))
        _kubectl(kubeconfig, "apply", "--validate=false", "-f", str(WEBHOOKS))
        # The route's Gateway, of our class: the webhook judges only routes with a parent of ours.
        _kubectl(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=GATEWAY_OBJECTS)
        controller = subprocess.Popen(
            [
                *(sys.executable, "-m", "aether.cli", "controller", "--kube-api", url, "--pod-name", "c-0"),
                *("--lease-duration", "2", "--renew-deadline", "1.5", "--retry-period", "0.2"),
                *(f"--webhook-listen=127.0.0.1:{webhook_port}", "--init-image=registry.example/aether:1"),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + WAIT
        while not _ca_bundle_written(kubeconfig):
            assert time.monotonic() < deadline, "no caBundle written"
            assert controller.poll() is None, controller.stderr.read() if controller.stderr else ""
        denied = _run(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=BAD_ROUTE)
        assert denied.returncode != 0
        assert (
            'admission webhook "routes.validate.gateway.aether.io" denied the request: spec.rules[0] dropped: '
            "spec.rules[0].matches[0].path.value: "
        ) in denied.stderr, denied.stderr
        _kubectl(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=MESH_CONFIG)
        projected: dict[str, Any] = {}
        while not projected:
            assert time.monotonic() < deadline, "no ConfigMap projected"
            shown = _run(
                kubeconfig, "get", "configmap", "aether-mesh-config", "-n", "aether-system", "-o", "yaml"
            )
            if shown.returncode == 0:
                projected = yaml.safe_load(yaml.safe_load(shown.stdout)["data"]["mesh-config.yaml"])
        assert projected == {
            "meshDomain": "corp.mesh",
            "proxy": {"tracingEnabled": True},
            "trustDomain": "corp.example",
        }
        _kubectl(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=MESHED_POD)
        pod = yaml.safe_load(_kubectl(kubeconfig, "get", "pod", "web-0", "-n", "shop", "-o", "yaml"))
        [ready] = pod["spec"]["initContainers"]
        assert ready["args"] == ["--inbound", "--trust-domain=corp.example"]
    finally:
        for process in (controller, api):
            if process is not None:
                process.terminate()
                process.wait(timeout=10)


def _ca_bundle_written(kubeconfig: Path) -> bool:
    shown = yaml.safe_load(
        _kubectl(kubeconfig, "get", "validatingwebhookconfiguration", "aether-validation", "-o", "yaml")
    )
    return all(hook["clientConfig"].get("caBundle") for hook in shown["webhooks"])
