"""The webhooks served for real: `serve_webhooks` over TLS with its generated certificate (stored in the Secret, its
CA written into our configurations' caBundle), called by the test API server as kube-apiserver calls them, with
the real kubectl as the client: a route with an uncompilable regex is denied with the core's message, a valid one
admitted, a pod in a labelled namespace comes back mutated. Plus what a broken client gets from the server."""

from __future__ import annotations

import base64
import functools
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from aether.controller import (
    SERVING_SECRET,
    PodMutation,
    WebhookOptions,
    WebhookServer,
    route_verdict,
    serve_webhooks,
)
from aether.core.events import MeshConfig
from aether.kube import ClusterConfig, KubeClient
from aether.kube.resources import NAMESPACES, SECRETS
from aether.testing.kubeapi import KubeApi, open_kube_api
from aether.testing.kubediscovery import served_resources
from aether.testing.kubewrites import Rejected
from aether.testing.xds_resources import pick_free_port
from tests.controller.test_review import BAD_REGEX_ROUTE, _review
from tests.manifests.test_apply import KUBECONFIG
from tests.needs import needs

MANIFESTS = Path(__file__).parents[2] / "manifests" / "base"
WAIT = 30.0
IMAGE = "registry.example/aether:1.0"
SERVICE = "aether-system/aether-controller:443"


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[KubeApi, WebhookServer]]:
    """The test API server with our webhook configurations and a `shop` namespace labelled for the mesh, and a
    replica's webhooks (generated certificate) reached through the Service's address map."""
    port = pick_free_port()
    async with open_kube_api(
        resources=served_resources(), webhook_addresses={SERVICE: f"127.0.0.1:{port}"}
    ) as api:
        for document in yaml.safe_load_all((MANIFESTS / "webhooks.yaml").read_text()):
            api.store.create(_resource(api, document["kind"]), document)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}
        namespace["metadata"]["labels"] = {"aether.io/managed": "true"}
        api.store.create(NAMESPACES, namespace)
        client = KubeClient(ClusterConfig.from_url(api.url))
        options = WebhookOptions(host="127.0.0.1", port=port, image=IMAGE)
        async with trio.open_nursery() as nursery:
            server = await nursery.start(serve_webhooks, client, options)
            assert isinstance(server, WebhookServer)
            yield api, server
            nursery.cancel_scope.cancel()


def _secret(api: KubeApi) -> dict[str, Any]:
    """The Secret holding the replicas' generated pair."""
    namespace, name = SERVING_SECRET
    secret = api.store.get(SECRETS, name=name, namespace=namespace)
    assert secret is not None
    return secret


def _resource(api: KubeApi, kind: str) -> Any:
    return next(resource for resource in api.store.kinds.values() if resource.kind == kind)


async def _kubectl(tmp_path: Path, api: KubeApi, *argv: str, stdin: str = "") -> trio.CompletedProcess[bytes]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(url=api.url))
    with trio.fail_after(WAIT):
        return await trio.run_process(
            ["kubectl", "--kubeconfig", str(kubeconfig), *argv],
            stdin=stdin.encode(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def test_the_generated_certificate_is_shared_and_its_ca_written(
    cluster: tuple[KubeApi, WebhookServer],
) -> None:
    api, _ = cluster
    secret = _secret(api)
    assert secret["type"] == "kubernetes.io/tls"
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        [configuration] = api.store.objects_at(
            (_resource(api, kind).group, _resource(api, kind).plural), revision=api.store.revision
        ).values()
        bundles = {hook["clientConfig"]["caBundle"] for hook in configuration["webhooks"]}
        assert bundles == {secret["data"]["ca.crt"]}, kind


@needs("kubectl")
async def test_kubectl_apply_is_denied_admitted_and_mutated(
    cluster: tuple[KubeApi, WebhookServer], tmp_path: Path
) -> None:
    api, server = cluster
    denied = await _kubectl(
        tmp_path, api, "apply", "--validate=false", "-f", "-", stdin=json.dumps(BAD_REGEX_ROUTE)
    )
    assert denied.returncode != 0
    expected = route_verdict("HTTPRoute", BAD_REGEX_ROUTE).message
    message = f'admission webhook "routes.validate.gateway.aether.io" denied the request: {expected}'
    assert message in denied.stderr.decode(), denied.stderr
    good = json.loads(json.dumps(BAD_REGEX_ROUTE))
    good["metadata"]["name"] = "good"
    good["spec"]["rules"][0]["matches"][0]["path"] = {"type": "RegularExpression", "value": "/api/v[0-9]+"}
    admitted = await _kubectl(tmp_path, api, "apply", "--validate=false", "-f", "-", stdin=json.dumps(good))
    assert admitted.returncode == 0, admitted.stderr
    partly = json.loads(json.dumps(BAD_REGEX_ROUTE))
    partly["metadata"]["name"] = "partly"
    partly["spec"]["rules"].append(good["spec"]["rules"][0])
    warned = await _kubectl(tmp_path, api, "apply", "--validate=false", "-f", "-", stdin=json.dumps(partly))
    assert warned.returncode == 0, warned.stderr
    assert f"Warning: {expected}" in warned.stderr.decode(), warned.stderr
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop"},
        "spec": {"containers": [{"name": "web", "image": "web:1"}]},
    }
    created = await _kubectl(tmp_path, api, "apply", "--validate=false", "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr
    shown = await _kubectl(tmp_path, api, "get", "pod", "web-0", "-n", "shop", "-o", "json")
    mutated = json.loads(shown.stdout)
    assert mutated["metadata"]["labels"]["aether.io/managed"] == "true"
    assert mutated["spec"]["dnsConfig"] == {"options": [{"name": "ndots", "value": "3"}]}
    assert [(c["name"], c["image"]) for c in mutated["spec"]["initContainers"]] == [
        ("aether-identity-ready", IMAGE)
    ]
    statistics = server.statistics()
    assert (statistics.denied, statistics.patched) == (1, 1)


async def test_a_pod_elsewhere_is_not_sent_and_a_dead_webhook_is_ignored(
    cluster: tuple[KubeApi, WebhookServer],
) -> None:
    """A pod outside a labelled namespace is not reviewed; with the webhooks' address dead, Ignore lets writes by."""
    api, server = cluster
    before = server.statistics().reviews
    admitted = await api.webhooks.admit(
        _resource(api, "Pod"),
        operation="CREATE",
        namespace="default",
        obj={"metadata": {"name": "p", "namespace": "default"}, "spec": {}},
        old=None,
    )
    assert admitted.object["spec"] == {}
    assert server.statistics().reviews == before
    api.webhooks.service_addresses[SERVICE] = f"127.0.0.1:{pick_free_port()}"
    admitted = await api.webhooks.admit(
        _resource(api, "HTTPRoute"), operation="CREATE", namespace="shop", obj=dict(BAD_REGEX_ROUTE), old=None
    )
    assert admitted.object == BAD_REGEX_ROUTE
    assert api.webhooks.failures == 1


async def _post(port: int, ca_pem: bytes, request: bytes) -> bytes:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    stream = trio.SSLStream(tcp, context, server_hostname="aether-controller.aether-system.svc")
    async with stream:
        await stream.send_all(request)
        received = b""
        with trio.fail_after(WAIT):
            while chunk := await stream.receive_some():
                received += chunk
                if b"\r\n\r\n" in received:
                    head, _, body = received.partition(b"\r\n\r\n")
                    length = int(
                        next(
                            line.split(b":")[1]
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        )
                    )
                    if len(body) >= length:
                        return received
    return received


async def test_broken_clients_get_clear_answers_and_the_server_goes_on(
    cluster: tuple[KubeApi, WebhookServer],
) -> None:
    api, server = cluster
    ca_pem = base64.b64decode(_secret(api)["data"]["ca.crt"])
    # Plain TCP garbage where TLS is expected: that connection only is dropped.
    tcp = await trio.open_tcp_stream("127.0.0.1", server.port)
    async with tcp:
        await tcp.send_all(b"GET / HTTP/1.1\r\n\r\n")
        with trio.fail_after(WAIT):
            while await tcp.receive_some():
                pass
    body = b"this is not a review"
    answer = await _post(
        server.port,
        ca_pem,
        b"POST /validate-route HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
    )
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"not an AdmissionReview admission.k8s.io/v1 request" in answer
    answer = await _post(server.port, ca_pem, b"NOT HTTP AT ALL\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    review = _review(BAD_REGEX_ROUTE, kind="HTTPRoute")
    answer = await _post(
        server.port,
        ca_pem,
        b"POST /validate-route HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(review), review),
    )
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b'"allowed":false' in answer


async def test_failure_policy_fail_refuses_as_the_api_server_does(
    cluster: tuple[KubeApi, WebhookServer],
) -> None:
    """Under `failurePolicy: Fail` a webhook that cannot be called refuses the write with 500 InternalError."""
    api, _ = cluster
    validating = _resource(api, "ValidatingWebhookConfiguration")
    stored = api.store.get(validating, name="aether-validation")
    assert stored is not None
    for hook in stored["webhooks"]:
        hook["failurePolicy"] = "Fail"
    api.store.update(validating, stored)
    api.webhooks.service_addresses[SERVICE] = f"127.0.0.1:{pick_free_port()}"
    with pytest.raises(Rejected) as raised:
        await api.webhooks.admit(
            _resource(api, "HTTPRoute"),
            operation="CREATE",
            namespace="shop",
            obj=dict(BAD_REGEX_ROUTE),
            old=None,
        )
    assert (raised.value.code, raised.value.reason) == (500, "InternalError")
    assert raised.value.message.startswith(
        'Internal error occurred: failed calling webhook "routes.validate.gateway.aether.io": failed to call '
        'webhook: Post "https://aether-controller.aether-system.svc:443/validate-route": dial tcp'
    ), raised.value.message


async def test_a_flag_fixes_its_domain_and_the_mesh_config_in_force_gives_the_other() -> None:
    """`--trust-domain` given, `--mesh-domain` not: the served mutation takes the flag's trust domain whatever the
    projected MeshConfig says, and that MeshConfig's mesh domain; before one is projected, the flag and the default."""
    in_force: list[MeshConfig | None] = [None]
    async with open_kube_api(resources=served_resources()) as api:
        client = KubeClient(ClusterConfig.from_url(api.url))
        options = WebhookOptions(host="127.0.0.1", port=0, image=IMAGE, trust_domain="flag.example")
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                functools.partial(serve_webhooks, client, options, mesh_config=lambda: in_force[0])
            )
            assert isinstance(server, WebhookServer)
            assert server.current_mutation() == PodMutation(image=IMAGE, trust_domain="flag.example")
            in_force[0] = MeshConfig(trust_domain="corp.example", mesh_domain="corp.mesh")
            assert server.current_mutation() == PodMutation(
                image=IMAGE, trust_domain="flag.example", mesh_domain="corp.mesh"
            )
            nursery.cancel_scope.cancel()
