"""The controller's telemetry through a real collector: a replica elected leader, its webhooks reviewing a route
that is denied, a pod that is patched, and a request that is not a review; rotel carries the metrics and spans to
the sink the test reads."""

from __future__ import annotations

import base64
from pathlib import Path

import trio
import yaml

from aether.controller import (
    ControllerConfig,
    WebhookOptions,
    WebhookServer,
    route_verdict,
    serve_controller,
    serve_webhooks,
)
from aether.controller.election import ElectionTiming
from aether.kube import ClusterConfig, KubeClient
from aether.kube.resources import NAMESPACES
from aether.testing.envoy import wait_for
from aether.testing.kubeapi import open_kube_api
from aether.testing.kubediscovery import served_resources
from aether.testing.kubewrites import Rejected
from aether.testing.otlp_collector import OtlpSink, point_value, telemetry_through_rotel
from aether.testing.xds_resources import pick_free_port
from tests.controller.test_review import BAD_REGEX_ROUTE
from tests.controller.test_webhooks import MANIFESTS, SERVICE, _post, _resource, _secret

SERVICE_NAME = "aether-controller"
TIMING = ElectionTiming(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
WAIT = 30.0


def _counted(sink: OtlpSink, name: str, **attributes: str) -> float | None:
    metric = sink.latest(name, service=SERVICE_NAME)
    return None if metric is None else point_value(metric, **attributes)


async def test_reviews_status_and_leadership_reach_a_real_collector(tmp_path: Path) -> None:
    port = pick_free_port()
    async with (
        telemetry_through_rotel(
            tmp_path / "rotel", service_name=SERVICE_NAME, metrics=True, traces=True
        ) as sink,
        open_kube_api(resources=served_resources(), webhook_addresses={SERVICE: f"127.0.0.1:{port}"}) as api,
    ):
        for document in yaml.safe_load_all((MANIFESTS / "webhooks.yaml").read_text()):
            api.store.create(_resource(api, document["kind"]), document)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}
        namespace["metadata"]["labels"] = {"aether.io/managed": "true"}
        api.store.create(NAMESPACES, namespace)
        client = KubeClient(ClusterConfig.from_url(api.url))
        async with trio.open_nursery() as nursery:
            running = await nursery.start(
                serve_controller, client, ControllerConfig(identity="replica-0", timing=TIMING)
            )
            server = await nursery.start(
                serve_webhooks, client, WebhookOptions(host="127.0.0.1", port=port, image="img:1")
            )
            assert isinstance(server, WebhookServer)
            await wait_for(lambda: _true(running.statistics().leading), timeout=WAIT)
            try:
                await api.webhooks.admit(
                    _resource(api, "HTTPRoute"),
                    operation="CREATE",
                    namespace="shop",
                    obj=dict(BAD_REGEX_ROUTE),
                    old=None,
                )
                raise AssertionError("the bad route was admitted")
            except Rejected:
                pass
            pod = {"metadata": {"name": "web-0", "namespace": "shop"}, "spec": {"containers": []}}
            await api.webhooks.admit(
                _resource(api, "Pod"), operation="CREATE", namespace="shop", obj=pod, old=None
            )
            ca_pem = base64.b64decode(_secret(api)["data"]["ca.crt"])
            body = b"this is not a review"
            await _post(
                port,
                ca_pem,
                b"POST /validate-route HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body),
            )

            async def exported() -> bool:
                await trio.sleep(0.05)
                return (
                    _counted(
                        sink,
                        "aether.controller.webhook.reviews",
                        **{"aether.webhook.result": "bad_request"},
                    )
                    == 1
                    and _counted(sink, "aether.controller.leader") == 1
                    and len(sink.spans(service=SERVICE_NAME)) >= 3
                )

            await wait_for(exported, timeout=WAIT)
            nursery.cancel_scope.cancel()
    reviews = sink.latest("aether.controller.webhook.reviews", service=SERVICE_NAME)
    assert reviews is not None
    assert reviews.unit == "{review}"
    assert reviews.sum.is_monotonic
    for result, count in (("denied", 1), ("patched", 1), ("bad_request", 1), ("allowed", 0)):
        assert point_value(reviews, **{"aether.webhook.result": result}) == count, result
    duration = sink.latest("aether.controller.webhook.review.duration", service=SERVICE_NAME)
    assert duration is not None
    assert duration.unit == "s"
    assert (
        point_value(duration, **{"aether.webhook.path": "/validate-route", "aether.webhook.result": "denied"})
        == 1
    )
    assert (
        point_value(
            duration, **{"aether.webhook.path": "/validate-route", "aether.webhook.result": "bad_request"}
        )
        == 1
    )
    leader = sink.latest("aether.controller.leader", service=SERVICE_NAME)
    assert leader is not None
    assert leader.unit == "1"
    transitions = sink.latest("aether.controller.leader.transitions", service=SERVICE_NAME)
    assert transitions is not None
    assert point_value(transitions, **{"aether.controller.transition": "elected"}) == 1
    assert point_value(transitions, **{"aether.controller.transition": "deposed"}) == 0
    lease_writes = sink.latest("aether.controller.lease.writes", service=SERVICE_NAME)
    assert lease_writes is not None
    assert (point_value(lease_writes, **{"aether.controller.result": "written"}) or 0) >= 1
    writes = sink.latest("aether.controller.status.writes", service=SERVICE_NAME)
    assert writes is not None
    assert writes.unit == "{write}"
    spans = [span for span in sink.spans(service=SERVICE_NAME) if span.name == "aether.webhook.review"]
    denied = [span for span in spans if any(kv.value.string_value == "denied" for kv in span.attributes)]
    assert len(denied) == 1
    assert not denied[0].parent_span_id
    assert denied[0].status.message == route_verdict("HTTPRoute", BAD_REGEX_ROUTE).message


async def _true(value: bool) -> bool:
    return value
