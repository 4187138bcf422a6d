"""kubectl as a real client: `kubectl apply` a Gateway and an HTTPRoute to the standalone test API server, run
`aether controller` on it, and `kubectl get httproute -o yaml` shows the status the controller wrote."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from aether.core.gateway import EDGE_CONTROLLER
from tests.manifests.test_apply import KUBECONFIG, kube_api
from tests.needs import needs

pytestmark = needs("kubectl")

__all__ = ["kube_api"]

OBJECTS = f"""
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
---
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


def _kubectl(kubeconfig: Path, *argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
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
