"""The test API server behaves as the Kubernetes API documents (api-concepts: resource versions, paging, watches,
bookmarks, 410 Gone), checked on the wire with a plain HTTP client and through `KubeClient`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from aether.http1 import http_get
from aether.kube.api import KubeClient, WatchEvent
from aether.kube.config import ClusterConfig
from aether.kube.errors import ApiConnectionError, ApiStatusError, ResourceExpiredError
from aether.kube.resources import GATEWAY_API_GROUP, HTTP_ROUTES, NODES, PODS, SERVICES, ResourceType
from aether.testing.kubeapi import KubeApi, open_kube_api

HTTP_ROUTES_BETA = ResourceType(
    group=GATEWAY_API_GROUP, version="v1beta1", plural="httproutes", kind="HTTPRoute", namespaced=True
)


def pod(
    name: str, *, namespace: str = "shop", node: str = "node-1", labels: dict[str, str] | None = None
) -> Any:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node, "serviceAccountName": "web"},
        "status": {"phase": "Running"},
    }


@pytest.fixture
async def api() -> AsyncIterator[KubeApi]:
    async with open_kube_api() as server:
        yield server


def client_of(api: KubeApi) -> KubeClient:
    return KubeClient(ClusterConfig.from_url(api.url))


async def get_json(api: KubeApi, path: str) -> tuple[int, Any]:
    response = await http_get("127.0.0.1", api.port, path)
    return response.status, json.loads(response.body)


async def next_events(events: AsyncIterator[WatchEvent], count: int) -> list[tuple[str, str, str]]:
    got = []
    with trio.fail_after(5):
        async for event in events:
            got.append((event.type, event.object["metadata"].get("name", ""), event.resource_version))
            if len(got) == count:
                break
    return got


async def test_list_version_is_the_global_revision(api: KubeApi) -> None:
    """A list's resourceVersion is the store's revision, which writes of any kind advance."""
    api.store.create(PODS, pod("a"))
    api.store.create(NODES, {"metadata": {"name": "node-1"}})
    status, body = await get_json(api, "/api/v1/pods")
    assert status == 200
    assert body["kind"] == "PodList"
    assert body["metadata"] == {"resourceVersion": str(api.store.revision)}
    assert [item["metadata"]["resourceVersion"] for item in body["items"]] == ["2"]
    assert api.store.revision == 3


async def test_builtin_list_items_omit_kind_and_custom_ones_carry_it(api: KubeApi) -> None:
    """Core list items come without kind/apiVersion (the list carries them); CRD items and watch objects have them."""
    api.store.create(PODS, pod("a"))
    api.store.create(HTTP_ROUTES, {"metadata": {"name": "r", "namespace": "shop"}, "spec": {}})
    _, pods = await get_json(api, "/api/v1/pods")
    _, routes = await get_json(api, f"/apis/{GATEWAY_API_GROUP}/v1/httproutes")
    assert ("kind" in pods["items"][0], "apiVersion" in pods["items"][0]) == (False, False)
    assert (routes["items"][0]["kind"], routes["items"][0]["apiVersion"]) == (
        "HTTPRoute",
        f"{GATEWAY_API_GROUP}/v1",
    )
    listed = await client_of(api).list_all(PODS)
    assert (listed.items[0]["kind"], listed.items[0]["apiVersion"]) == ("Pod", "v1")


async def test_one_storage_serves_every_version_of_a_kind(api: KubeApi) -> None:
    """An HTTPRoute written at v1 lists at v1beta1 too, its apiVersion rewritten."""
    api.store.create(HTTP_ROUTES, {"metadata": {"name": "r", "namespace": "shop"}, "spec": {}})
    listed = await client_of(api).list_all(HTTP_ROUTES_BETA, namespace="shop")
    assert [item["apiVersion"] for item in listed.items] == [f"{GATEWAY_API_GROUP}/v1beta1"]


async def test_paging_is_a_consistent_snapshot(api: KubeApi) -> None:
    """Pages after the first are served at the first page's version: later writes do not show up."""
    for name in ("a", "b", "c", "d"):
        api.store.create(PODS, pod(name))
    client = client_of(api)
    first = await client.list_page(PODS, limit=2)
    _, raw = await get_json(api, "/api/v1/pods?limit=2")
    assert raw["metadata"]["remainingItemCount"] == 2
    api.store.delete(PODS, name="c", namespace="shop")
    api.store.create(PODS, pod("bb"))
    second = await client.list_page(PODS, limit=2, continue_token=first.continue_token)
    names = [item["metadata"]["name"] for item in (*first.items, *second.items)]
    assert (names, second.resource_version, second.continue_token) == (["a", "b", "c", "d"], "5", "")


async def test_expired_continue_token_is_410_with_a_fresh_token(api: KubeApi) -> None:
    """A continue token whose version was compacted gets 410 Expired, and a token that continues from now."""
    for name in ("a", "b", "c"):
        api.store.create(PODS, pod(name))
    first = await client_of(api).list_page(PODS, limit=1)
    api.store.create(PODS, pod("z"))
    api.compact()
    status, body = await get_json(api, f"/api/v1/pods?limit=1&continue={first.continue_token}")
    assert (status, body["kind"], body["status"], body["reason"], body["code"]) == (
        410,
        "Status",
        "Failure",
        "Expired",
        410,
    )
    status, rest = await get_json(api, f"/api/v1/pods?continue={body['metadata']['continue']}")
    assert (status, [item["metadata"]["name"] for item in rest["items"]]) == (200, ["b", "c", "z"])
    with pytest.raises(ResourceExpiredError):
        await client_of(api).list_page(PODS, continue_token=first.continue_token)


async def test_list_all_starts_over_when_its_token_expires(api: KubeApi) -> None:
    """`list_all` lists again from the start (consistently) when a continue token expires mid-way."""
    for name in ("a", "b", "c"):
        api.store.create(PODS, pod(name))
    client = client_of(api)
    original = client.list_page
    calls = 0

    async def compacting_list_page(resource: ResourceType, **options: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            api.store.create(PODS, pod("d"))
            api.compact()
        return await original(resource, **options)

    client.list_page = compacting_list_page  # type: ignore[method-assign]
    listed = await client.list_all(PODS, page_size=2)
    assert ([item["metadata"]["name"] for item in listed.items], listed.resource_version) == (
        ["a", "b", "c", "d"],
        "5",
    )


async def test_list_resource_version_semantics(api: KubeApi) -> None:
    """Not-older-than by default, Exact on request (or with a limit); a version newer than the store is 504 'too
    large'; an Exact list of a compacted version is 410."""
    api.store.create(PODS, pod("a"))
    api.store.create(PODS, pod("b"))
    status, body = await get_json(api, "/api/v1/pods?resourceVersion=99")
    assert (status, body["reason"]) == (504, "Timeout")
    status, body = await get_json(api, "/api/v1/pods?resourceVersion=2&resourceVersionMatch=Exact")
    assert (status, [item["metadata"]["name"] for item in body["items"]]) == (200, ["a"])
    status, body = await get_json(api, "/api/v1/pods?resourceVersion=2")
    assert (status, body["metadata"]["resourceVersion"]) == (200, "3")
    # The legacy rule (KEP-2523): without resourceVersionMatch, a limit makes a non-zero version Exact.
    status, body = await get_json(api, "/api/v1/pods?resourceVersion=2&limit=5")
    assert (status, body["metadata"]["resourceVersion"], len(body["items"])) == (200, "2", 1)
    api.compact()
    status, body = await get_json(api, "/api/v1/pods?resourceVersion=2&resourceVersionMatch=Exact")
    assert (status, body["reason"], body["message"]) == (410, "Expired", "too old resource version: 2 (3)")


async def test_label_and_field_selectors(api: KubeApi) -> None:
    """labelSelector and fieldSelector (spec.nodeName) filter lists; unsupported fields are a 400."""
    api.store.create(PODS, pod("a", labels={"aether.io/managed": "true"}))
    api.store.create(PODS, pod("b", node="node-2", labels={"aether.io/managed": "true"}))
    api.store.create(PODS, pod("c"))
    listed = await client_of(api).list_all(
        PODS, label_selector="aether.io/managed=true", field_selector="spec.nodeName=node-2"
    )
    assert [item["metadata"]["name"] for item in listed.items] == ["b"]
    listed = await client_of(api).list_all(PODS, label_selector="!aether.io/managed")
    assert [item["metadata"]["name"] for item in listed.items] == ["c"]
    status, body = await get_json(api, "/api/v1/pods?fieldSelector=spec.foo%3Dx")
    assert (status, body["reason"], body["message"]) == (
        400,
        "BadRequest",
        "field label not supported: spec.foo",
    )
    with pytest.raises(
        ApiStatusError,
        match=r"^kubernetes api '/api/v1/services': 400 BadRequest: field label not supported: spec.nodeName$",
    ):
        await client_of(api).list_all(SERVICES, field_selector="spec.nodeName=x")


async def test_watch_from_a_version_streams_later_changes_in_order(api: KubeApi) -> None:
    """A watch from the list's version sees each later change once, in order; DELETED carries the deletion's version."""
    api.store.create(PODS, pod("a"))
    client = client_of(api)
    listed = await client.list_all(PODS)
    async with client.open_watch(PODS, resource_version=listed.resource_version) as events:
        api.store.create(PODS, pod("b"))
        api.store.update(PODS, pod("a", labels={"x": "1"}))
        api.store.delete(PODS, name="b", namespace="shop")
        got = await next_events(events, 3)
    assert got == [("ADDED", "b", "3"), ("MODIFIED", "a", "4"), ("DELETED", "b", "5")]


async def test_watch_without_version_starts_with_the_current_state(api: KubeApi) -> None:
    """A watch without resourceVersion first sends synthetic ADDED events for what exists."""
    api.store.create(PODS, pod("b"))
    api.store.create(PODS, pod("a"))
    async with client_of(api).open_watch(PODS, resource_version="") as events:
        api.store.create(PODS, pod("c"))
        got = await next_events(events, 3)
    assert got == [("ADDED", "a", "3"), ("ADDED", "b", "2"), ("ADDED", "c", "4")]


async def test_watch_from_a_compacted_version_is_an_error_event_410(api: KubeApi) -> None:
    """The real server answers 200, then one ERROR event holding a Status 410 Expired, and ends the stream."""
    api.store.create(PODS, pod("a"))
    api.store.create(PODS, pod("b"))
    api.compact()
    response = await http_get("127.0.0.1", api.port, "/api/v1/pods?watch=1&resourceVersion=1")
    assert (response.status, response.headers.get("transfer-encoding")) == (200, "chunked")
    assert [json.loads(line) for line in response.body.splitlines()] == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version: 1 (3)",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]
    with pytest.raises(ResourceExpiredError, match=r"too old resource version: 1 \(3\)$"):
        async with client_of(api).open_watch(PODS, resource_version="1") as events:
            await next_events(events, 1)


async def test_bookmarks_only_when_allowed_and_carry_only_the_version(api: KubeApi) -> None:
    """BOOKMARK events come only to watches that allow them; they hold kind, apiVersion and resourceVersion."""
    api.store.create(PODS, pod("a"))
    client = client_of(api)
    async with (
        client.open_watch(PODS, resource_version="2", allow_bookmarks=False) as plain,
        client.open_watch(PODS, resource_version="2") as bookmarked,
    ):
        api.store.create(NODES, {"metadata": {"name": "node-1"}})
        api.send_bookmarks()
        with trio.fail_after(5):
            event = await bookmarked.__anext__()
        assert (event.type, event.object) == (
            "BOOKMARK",
            {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "3"}},
        )
        api.store.create(PODS, pod("b"))
        assert await next_events(plain, 1) == [("ADDED", "b", "4")]


async def test_timeout_seconds_ends_the_stream_cleanly(api: KubeApi) -> None:
    """`timeoutSeconds` ends the watch with a complete chunked body (a final bookmark when allowed)."""
    response = await http_get(
        "127.0.0.1",
        api.port,
        "/api/v1/pods?watch=1&resourceVersion=1&timeoutSeconds=1&allowWatchBookmarks=true",
    )
    assert [json.loads(line)["type"] for line in response.body.splitlines()] == ["BOOKMARK"]


async def test_objects_leaving_a_selection_are_deleted_for_the_watch(api: KubeApi) -> None:
    """A filtered watch sees an object whose labels stop matching as DELETED, and one that starts as ADDED."""
    api.store.create(PODS, pod("a", labels={"aether.io/managed": "true"}))
    api.store.create(PODS, pod("b"))
    async with client_of(api).open_watch(
        PODS, resource_version="3", label_selector="aether.io/managed=true"
    ) as events:
        api.store.update(PODS, pod("a"))
        api.store.update(PODS, pod("b", labels={"aether.io/managed": "true"}))
        api.store.update(PODS, pod("b", labels={"aether.io/managed": "true", "v": "2"}))
        got = await next_events(events, 3)
    assert got == [("DELETED", "a", "4"), ("ADDED", "b", "5"), ("MODIFIED", "b", "6")]


async def test_bearer_token_is_required_when_configured() -> None:
    """With a token configured, requests without it get a 401 Status; with it, 200."""
    async with open_kube_api(token="s3cret") as api:
        status, body = await get_json(api, "/api/v1/pods")
        assert (status, body["reason"]) == (401, "Unauthorized")
        listed = await KubeClient(ClusterConfig.from_url(api.url, token="s3cret")).list_all(PODS)
        assert listed.items == ()


async def test_unknown_paths_and_methods(api: KubeApi) -> None:
    """Unknown resources are 404 NotFound; a cluster-scoped kind under a namespace too; single objects are served."""
    assert (await get_json(api, "/api/v1/widgets"))[0] == 404
    assert (await get_json(api, "/api/v1/namespaces/shop/nodes"))[0] == 404
    api.store.create(PODS, pod("a"))
    status, body = await get_json(api, "/api/v1/namespaces/shop/pods/a")
    assert (status, body["kind"], body["metadata"]["name"]) == (200, "Pod", "a")
    with pytest.raises(ApiStatusError, match=r"404 NotFound"):
        await client_of(api).get(PODS, name="zz", namespace="shop")


async def test_dropped_watches_break_mid_stream(api: KubeApi) -> None:
    """`drop_watches` cuts the connection without ending the chunked body: the client sees a broken stream."""
    client = client_of(api)
    async with client.open_watch(PODS, resource_version="1") as events:
        with trio.fail_after(5):
            await api.wait_watches()
        assert api.drop_watches() == 1
        with pytest.raises(ApiConnectionError, match=r"connection broke|ended early"):
            await next_events(events, 1)


async def test_restart_compacts_history_unless_kept() -> None:
    """After a restart the watch cache starts at the current revision (old versions get 410), unless history is kept."""
    async with open_kube_api() as api, trio.open_nursery() as nursery:
        port = api.port
        api.store.create(PODS, pod("a"))
        await api.restart(nursery=nursery, keep_history=True)
        async with client_of(api).open_watch(PODS, resource_version="1") as events:
            assert await next_events(events, 1) == [("ADDED", "a", "2")]
        await api.restart(nursery=nursery)
        assert api.port == port
        with pytest.raises(ResourceExpiredError):
            async with client_of(api).open_watch(PODS, resource_version="1") as events:
                await next_events(events, 1)
        await api.stop()
        with pytest.raises(ApiConnectionError):
            await client_of(api).list_all(PODS)


async def test_injected_failures_answer_with_statuses(api: KubeApi) -> None:
    """`fail_next` refuses API requests as a throttling (429 with Retry-After) or failing (500) server does."""
    api.fail_next(1, code=429)
    api.fail_next(1, code=500)
    throttled = await http_get("127.0.0.1", api.port, "/api/v1/pods")
    failed = await http_get("127.0.0.1", api.port, "/api/v1/pods")
    served = await http_get("127.0.0.1", api.port, "/api/v1/pods")
    assert (throttled.status, throttled.headers.get("retry-after"), json.loads(throttled.body)["reason"]) == (
        429,
        "1",
        "TooManyRequests",
    )
    assert (failed.status, json.loads(failed.body)["reason"], served.status) == (500, "InternalError", 200)


async def test_writes_over_http_reach_watches(api: KubeApi) -> None:
    """Create (201), replace, merge-patch and delete through the API: each is one watch event, in order."""
    client = client_of(api)
    async with client.open_watch(HTTP_ROUTES, resource_version="1") as events:
        created = await client.create(
            HTTP_ROUTES, {"metadata": {"name": "r"}, "spec": {"a": 1}}, namespace="shop"
        )
        assert (created["metadata"]["namespace"], created["metadata"]["generation"]) == ("shop", 1)
        replaced = await client.replace(HTTP_ROUTES, {**created, "spec": {"a": 2}})
        patched = await client.merge_patch(
            HTTP_ROUTES, name="r", namespace="shop", patch={"spec": {"a": None, "b": 3}}
        )
        await client.delete(HTTP_ROUTES, name="r", namespace="shop")
        got = await next_events(events, 4)
    assert (replaced["metadata"]["generation"], patched["spec"]) == (2, {"b": 3})
    assert got == [("ADDED", "r", "2"), ("MODIFIED", "r", "3"), ("MODIFIED", "r", "4"), ("DELETED", "r", "5")]


async def test_the_status_subresource_and_the_main_resource_change_separate_parts(api: KubeApi) -> None:
    """PUT/PATCH of `status` touch only status (no new generation); of the object, never status."""
    client = client_of(api)
    await client.create(HTTP_ROUTES, {"metadata": {"name": "r"}, "spec": {"a": 1}}, namespace="shop")
    conditions = {"parents": [{"controllerName": "gateway.aether.io/mesh"}]}
    with_status = await client.merge_patch(
        HTTP_ROUTES,
        name="r",
        namespace="shop",
        patch={"spec": {"a": 9}, "status": conditions},
        subresource="status",
    )
    assert (with_status["spec"], with_status["status"], with_status["metadata"]["generation"]) == (
        {"a": 1},
        conditions,
        1,
    )
    replaced = await client.replace(HTTP_ROUTES, {**with_status, "spec": {"a": 2}, "status": {}})
    assert (replaced["spec"], replaced["status"]) == ({"a": 2}, conditions)


async def test_stale_writes_conflict_and_bad_writes_are_refused(api: KubeApi) -> None:
    """A stale resourceVersion is 409 Conflict; a duplicate 409 AlreadyExists; a strategic patch 415."""
    client = client_of(api)
    created = await client.create(HTTP_ROUTES, {"metadata": {"name": "r"}, "spec": {}}, namespace="shop")
    await client.replace(HTTP_ROUTES, {**created, "spec": {"a": 1}})
    with pytest.raises(
        ApiStatusError, match=r"409 Conflict: Operation cannot be fulfilled on httproutes \"r\""
    ):
        await client.replace(HTTP_ROUTES, {**created, "spec": {"a": 2}})
    with pytest.raises(ApiStatusError, match=r"409 AlreadyExists"):
        await client.create(HTTP_ROUTES, {"metadata": {"name": "r"}}, namespace="shop")
    with pytest.raises(ApiStatusError, match=r"404 NotFound"):
        await client.delete(HTTP_ROUTES, name="missing", namespace="shop")
    response = await raw_request(
        api,
        "PATCH",
        f"/apis/{GATEWAY_API_GROUP}/v1/namespaces/shop/httproutes/r",
        b"{}",
        content_type="application/strategic-merge-patch+json",
    )
    assert response.startswith(b"HTTP/1.1 415 ")


async def raw_request(api: KubeApi, method: str, path: str, body: bytes, *, content_type: str) -> bytes:
    """Send one request by hand and return the raw response (for what the client never sends)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    stream = await trio.open_tcp_stream("127.0.0.1", api.port)
    async with stream:
        await stream.send_all(head.encode() + body)
        received = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some():
                received += chunk
    return received
