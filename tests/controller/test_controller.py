"""`aether controller` against the test API server: the leader writes the status the core computes, replicas take
turns through the Lease, conflicts are retried, other controllers' entries kept, and nothing unchanged is written."""

from __future__ import annotations

import base64
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio

from aether.controller import (
    ControllerConfig,
    ElectionTiming,
    LeaseName,
    RunningController,
    serve_controller,
    write_status,
)
from aether.core.gateway import EDGE_CONTROLLER, gateway_view
from aether.core.reduce import fold_event
from aether.core.state import EMPTY_STATE, State
from aether.identity.mint import TestCA
from aether.kube import (
    GATEWAY_CLASSES,
    GATEWAYS,
    HTTP_ROUTES,
    LEASES,
    NAMESPACES,
    SECRETS,
    SERVICES,
    ClusterConfig,
    KubeClient,
    ResourceType,
)
from aether.kube.convert import object_events
from aether.testing.kubeapi import KubeApi, open_kube_api
from aether.testing.kubediscovery import served_resources

TIMING = ElectionTiming(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
"""Short enough that a takeover happens within a test, long enough for a loaded machine's requests."""
LEASE = LeaseName(namespace="aether-system", name="aether-controller")
WAIT = 20.0
OTHER_CONTROLLER = "example.com/other-gateway"

GATEWAY_CLASS = {"metadata": {"name": "aether"}, "spec": {"controllerName": EDGE_CONTROLLER}}
GATEWAY = {
    "metadata": {"name": "edge", "namespace": "edge"},
    "spec": {
        "gatewayClassName": "aether",
        "listeners": [
            {
                "name": "http",
                "port": 8080,
                "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "All"}},
            }
        ],
    },
}
SERVICE = {
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}], "clusterIP": "10.96.0.20"},
}


def _route(name: str = "web", *, path: str = "/") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "parentRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "edge", "name": "edge"}
            ],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                    "backendRefs": [{"name": "web", "port": 80}],
                }
            ],
        },
    }


@pytest.fixture
async def api() -> AsyncIterator[KubeApi]:
    async with open_kube_api(resources=served_resources()) as server:
        store = server.store
        store.create(GATEWAY_CLASSES, GATEWAY_CLASS)
        store.create(GATEWAYS, GATEWAY)
        store.create(SERVICES, SERVICE)
        store.create(HTTP_ROUTES, _route())
        yield server


def _client(api: KubeApi) -> KubeClient:
    return KubeClient(ClusterConfig.from_url(api.url))


@attrs.frozen
class _Replica:
    """One started replica: its controller, and `kill()`, which ends it as a crash would."""

    controller: RunningController
    scope: trio.CancelScope
    gone: trio.Event

    async def kill(self) -> None:
        """Cancel the replica and wait until its task has ended: a write whose answer it had read when killed
        still counts (closing the connection is shielded), one it had not does not."""
        self.scope.cancel()
        with trio.fail_after(WAIT):
            await self.gone.wait()


async def _start(nursery: trio.Nursery, api: KubeApi, identity: str) -> _Replica:
    """Start one replica in its own cancel scope."""
    scope = trio.CancelScope()
    gone = trio.Event()

    async def replica(task_status: trio.TaskStatus[RunningController]) -> None:
        try:
            with scope:
                config = ControllerConfig(identity=identity, lease=LEASE, timing=TIMING)
                await serve_controller(_client(api), config, task_status=task_status)
        finally:
            gone.set()

    return _Replica(await nursery.start(replica), scope, gone)


async def _wait_until(condition: Callable[[], bool]) -> None:
    """Wait until `condition` holds, checking every few milliseconds (never longer than WAIT)."""
    with trio.fail_after(WAIT):
        while not condition():  # noqa: ASYNC110 - the condition spans the store and the replicas over sockets
            await trio.sleep(0.01)


def _stored(api: KubeApi, resource: ResourceType, name: str, namespace: str = "") -> dict[str, Any]:
    found = api.store.get(resource, name=name, namespace=namespace)
    assert found is not None
    return found


def _route_parents(api: KubeApi, name: str = "web") -> list[dict[str, Any]]:
    parents: list[dict[str, Any]] = (_stored(api, HTTP_ROUTES, name, "shop").get("status") or {}).get(
        "parents", []
    )
    return parents


def _accepted(api: KubeApi, *, generation: int = 1) -> bool:
    return any(
        parent["controllerName"] == EDGE_CONTROLLER
        and any(
            c["type"] == "Accepted" and c["status"] == "True" and c["observedGeneration"] == generation
            for c in parent["conditions"]
        )
        for parent in _route_parents(api)
    )


def _holder(api: KubeApi) -> str:
    lease = api.store.get(LEASES, name=LEASE.name, namespace=LEASE.namespace)
    return "" if lease is None else str(lease["spec"]["holderIdentity"])


async def test_the_leader_writes_the_status_of_the_class_the_gateway_and_the_route(api: KubeApi) -> None:
    """GatewayClass Accepted with supportedFeatures, Gateway Accepted and Programmed with its listener's attached
    route, and the route's parent entry under our controllerName, each with its observedGeneration."""
    async with trio.open_nursery() as nursery:
        await _start(nursery, api, "controller-a")
        await _wait_until(lambda: _accepted(api))
        nursery.cancel_scope.cancel()
    gateway_class = _stored(api, GATEWAY_CLASSES, "aether")["status"]
    assert [(c["type"], c["status"]) for c in gateway_class["conditions"]] == [("Accepted", "True")]
    assert {"name": "HTTPRoute"} in gateway_class["supportedFeatures"]
    gateway = _stored(api, GATEWAYS, "edge", "edge")["status"]
    assert [(c["type"], c["status"], c["observedGeneration"]) for c in gateway["conditions"]] == [
        ("Accepted", "True", 1),
        ("Programmed", "True", 1),
    ]
    [listener] = gateway["listeners"]
    assert (listener["name"], listener["attachedRoutes"]) == ("http", 1)
    [parent] = _route_parents(api)
    assert parent["parentRef"] == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": "edge",
        "name": "edge",
    }
    assert _holder(api) == "controller-a"


async def test_two_replicas_one_writes_and_the_other_takes_over_when_the_leader_dies(api: KubeApi) -> None:
    """Of two replicas only the Lease's holder writes; once it is killed, the other takes the Lease after it expires
    and writes the status of the next change."""
    async with trio.open_nursery() as nursery:
        first = await _start(nursery, api, "controller-a")
        second = await _start(nursery, api, "controller-b")
        await _wait_until(lambda: _accepted(api))
        replicas = {"controller-a": first, "controller-b": second}
        leader = _holder(api)
        [follower] = set(replicas) - {leader}
        assert replicas[leader].controller.statistics().status_writes > 0
        assert replicas[follower].controller.statistics().status_writes == 0
        assert not replicas[follower].controller.statistics().leading

        await replicas[leader].kill()
        killed_writes = replicas[leader].controller.statistics().status_writes
        route = _stored(api, HTTP_ROUTES, "web", "shop")
        route["spec"] = _route(path="/v2")["spec"]
        api.store.update(HTTP_ROUTES, route)
        # The store holds a write before its writer has read the answer: wait for both.
        taken_over = replicas[follower].controller
        await _wait_until(lambda: _accepted(api, generation=2) and taken_over.statistics().status_writes > 0)
        assert _holder(api) == follower
        assert replicas[leader].controller.statistics().status_writes == killed_writes
        nursery.cancel_scope.cancel()


async def test_a_status_write_racing_another_writer_is_retried_on_a_fresh_read(api: KubeApi) -> None:
    """The other writer's entry lands between our read and our write: our 409 is re-read, and both entries stay."""
    client = _client(api)
    observed = await client.get(HTTP_ROUTES, name="web", namespace="shop")
    theirs = {
        "parentRef": {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "namespace": "x",
            "name": "other",
        },
        "controllerName": OTHER_CONTROLLER,
        "conditions": [],
    }
    racing = copy.deepcopy(observed)
    racing["status"] = {"parents": [theirs]}
    await client.replace(HTTP_ROUTES, racing, subresource="status")

    state_view = gateway_view(_folded(api))
    outcome = await write_status(
        client,
        HTTP_ROUTES,
        observed,
        state_view.status["HTTPRoute/shop/web"],
        now=lambda: "2024-01-01T00:00:00Z",
        may_write=lambda: True,
    )
    assert (outcome.writes, outcome.conflicts) == (2, 1)
    parents = _route_parents(api)
    assert [parent["controllerName"] for parent in parents] == [OTHER_CONTROLLER, EDGE_CONTROLLER]
    assert parents[0] == theirs


async def test_another_controllers_parent_status_is_kept(api: KubeApi) -> None:
    """A route whose status already has another controller's entry gets ours beside it, theirs untouched."""
    route = _stored(api, HTTP_ROUTES, "web", "shop")
    theirs = {
        "parentRef": {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "namespace": "x",
            "name": "other",
        },
        "controllerName": OTHER_CONTROLLER,
        "conditions": [
            {
                "type": "Accepted",
                "status": "False",
                "reason": "NotAllowedByListeners",
                "message": "theirs",
                "observedGeneration": 1,
                "lastTransitionTime": "2023-05-05T00:00:00Z",
            }
        ],
    }
    route["status"] = {"parents": [theirs]}
    api.store.update(HTTP_ROUTES, route)
    async with trio.open_nursery() as nursery:
        await _start(nursery, api, "controller-a")
        await _wait_until(lambda: _accepted(api))
        nursery.cancel_scope.cancel()
    parents = _route_parents(api)
    assert parents[0] == theirs
    assert [parent["controllerName"] for parent in parents] == [OTHER_CONTROLLER, EDGE_CONTROLLER]


async def test_an_unchanged_status_is_not_written_again(api: KubeApi) -> None:
    """A new leader finding every status current (the last leader wrote it) issues no write."""
    async with trio.open_nursery() as nursery:
        first = await _start(nursery, api, "controller-a")
        await _wait_until(lambda: _accepted(api))
        await first.kill()
        revision = api.store.revision
        second = (await _start(nursery, api, "controller-b")).controller
        await _wait_until(lambda: second.statistics().reconciles >= 1)
        assert second.statistics().status_writes == 0
        writes = [
            obj
            for resource in (GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES)
            for obj in api.store.objects_at(
                ("gateway.networking.k8s.io", resource.plural), revision=api.store.revision
            ).values()
            if int(obj["metadata"]["resourceVersion"]) > revision
        ]
        assert writes == []
        nursery.cancel_scope.cancel()


def _folded(api: KubeApi) -> State:
    """The state the core folds from the store's Gateway API objects and Services (what a controller holds)."""
    state = EMPTY_STATE
    seq = 0
    for resource in (GATEWAY_CLASSES, GATEWAYS, SERVICES, HTTP_ROUTES):
        group = resource.group
        for obj in api.store.objects_at((group, resource.plural), revision=api.store.revision).values():
            for event in object_events(obj, source="test", observed_at=0):
                seq += 1
                state = fold_event(state, event, seq=seq)
    return state


async def test_an_https_listener_whose_tls_secret_is_watched_is_programmed(api: KubeApi) -> None:
    """The controller folds the cluster's `kubernetes.io/tls` Secrets (and only those): an HTTPS listener whose
    certificateRef names one is ResolvedRefs and Programmed, one naming an Opaque Secret is InvalidCertificateRef."""
    minted = TestCA(trust_domain="edge.test").issue("spiffe://edge.test/edge")
    api.store.create(
        SECRETS,
        {
            "metadata": {"name": "shop-cert", "namespace": "edge"},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(minted.cert_chain_pem).decode(),
                "tls.key": base64.b64encode(minted.private_key_pem).decode(),
            },
        },
    )
    api.store.create(
        SECRETS,
        {
            "metadata": {"name": "opaque", "namespace": "edge"},
            "type": "Opaque",
            "data": {
                "tls.crt": base64.b64encode(minted.cert_chain_pem).decode(),
                "tls.key": base64.b64encode(minted.private_key_pem).decode(),
            },
        },
    )
    gateway = copy.deepcopy(_stored(api, GATEWAYS, "edge", "edge"))
    gateway["spec"]["listeners"] += [
        {
            "name": f"https-{secret}",
            "port": 8443 + index,
            "protocol": "HTTPS",
            "hostname": f"{secret}.example",
            "tls": {"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": secret}]},
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }
        for index, secret in enumerate(("shop-cert", "opaque"))
    ]
    api.store.update(GATEWAYS, gateway)

    def listeners() -> dict[str, dict[str, str]]:
        status = _stored(api, GATEWAYS, "edge", "edge").get("status") or {}
        return {
            listener["name"]: {c["type"]: f"{c['status']}/{c['reason']}" for c in listener["conditions"]}
            for listener in status.get("listeners", [])
        }

    async with trio.open_nursery() as nursery:
        await _start(nursery, api, "controller-a")
        await _wait_until(lambda: {"https-shop-cert", "https-opaque"} <= set(listeners()))
        nursery.cancel_scope.cancel()
    found = listeners()
    assert found["https-shop-cert"]["ResolvedRefs"] == "True/ResolvedRefs"
    assert found["https-shop-cert"]["Programmed"] == "True/Programmed"
    assert found["https-opaque"]["ResolvedRefs"] == "False/InvalidCertificateRef"


async def test_a_listener_namespace_selector_follows_the_labels_of_the_watched_namespace(
    api: KubeApi,
) -> None:
    """A listener selecting `team: shop` admits the route of Namespace shop while it has that label, and refuses it
    (NotAllowedByListeners) once the Namespace is relabelled: the controller watches Namespaces."""
    selective = copy.deepcopy(GATEWAY)
    selective["metadata"]["name"] = "selective"
    selective["spec"]["listeners"][0]["port"] = 9090
    selective["spec"]["listeners"][0]["allowedRoutes"] = {
        "namespaces": {"from": "Selector", "selector": {"matchLabels": {"team": "shop"}}}
    }
    api.store.create(GATEWAYS, selective)
    route = _route()
    route["metadata"]["name"] = "selected"
    route["spec"]["parentRefs"][0]["name"] = "selective"
    api.store.create(HTTP_ROUTES, route)
    namespace = api.store.create(
        NAMESPACES,
        {"metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "shop", "team": "shop"}}},
    )

    def reason() -> str:
        parents = (_stored(api, HTTP_ROUTES, "selected", "shop").get("status") or {}).get("parents", [])
        return next(
            (c["reason"] for parent in parents for c in parent["conditions"] if c["type"] == "Accepted"), ""
        )

    async with trio.open_nursery() as nursery:
        await _start(nursery, api, "controller-a")
        await _wait_until(lambda: reason() == "Accepted")
        relabelled = copy.deepcopy(namespace)
        relabelled["metadata"]["labels"]["team"] = "other"
        api.store.update(NAMESPACES, relabelled)
        await _wait_until(lambda: reason() == "NotAllowedByListeners")
        nursery.cancel_scope.cancel()


async def test_a_replica_knows_which_gateways_are_ours(api: KubeApi) -> None:
    """`owns_gateway` (what the route webhook asks): a Gateway of a class naming our controller is ours; one of
    another implementation's class, and one never seen, are not."""
    api.store.create(
        GATEWAY_CLASSES, {"metadata": {"name": "other"}, "spec": {"controllerName": OTHER_CONTROLLER}}
    )
    theirs = copy.deepcopy(GATEWAY)
    theirs["metadata"]["name"] = "theirs"
    theirs["spec"]["gatewayClassName"] = "other"
    api.store.create(GATEWAYS, theirs)
    async with trio.open_nursery() as nursery:
        replica = await _start(nursery, api, "controller-a")
        await _wait_until(lambda: replica.controller.statistics().synced)
        assert replica.controller.owns_gateway("edge", "edge")
        assert not replica.controller.owns_gateway("edge", "theirs")
        assert not replica.controller.owns_gateway("edge", "missing")
        nursery.cancel_scope.cancel()


EDGE_SERVICE = {
    "metadata": {"name": "aether-edge", "namespace": "aether-system"},
    "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "clusterIP": "10.96.0.30"},
    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "edge.lb.example"}]}},
}


def _addresses(api: KubeApi) -> list[dict[str, str]]:
    addresses: list[dict[str, str]] = (_stored(api, GATEWAYS, "edge", "edge").get("status") or {}).get(
        "addresses", []
    )
    return addresses


async def test_the_gateways_addresses_are_the_edge_services_load_balancer_ingress(api: KubeApi) -> None:
    """Gateway `status.addresses`: the ingress the load balancer gave the edge's Service (IPs as IPAddress, names as
    Hostname); when it changes, the Gateway's addresses follow; without any, the field is left out."""
    async with trio.open_nursery() as nursery:
        replica = await _start(nursery, api, "controller-a")
        await _wait_until(lambda: _accepted(api))
        assert _addresses(api) == []
        api.store.create(SERVICES, copy.deepcopy(EDGE_SERVICE))
        expected = [
            {"type": "IPAddress", "value": "203.0.113.7"},
            {"type": "Hostname", "value": "edge.lb.example"},
        ]
        await _wait_until(lambda: _addresses(api) == expected)
        service = _stored(api, SERVICES, "aether-edge", "aether-system")
        service["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}
        api.store.update(SERVICES, service)
        await _wait_until(lambda: _addresses(api) == [{"type": "IPAddress", "value": "203.0.113.9"}])
        assert replica.controller.statistics().status_failures == 0
        nursery.cancel_scope.cancel()
