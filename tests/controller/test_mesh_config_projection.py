"""The MeshConfig projection against the test API server: each namespace's MeshConfig, merged over aether-system's,
lands in its ConfigMap `aether-mesh-config`; an edit rewrites it, an unchanged pass writes nothing, a MeshConfig
that breaks the CRD's rules keeps the last good ConfigMap, and a replica that does not lead writes nothing."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import yaml

from aether.controller import MeshConfigProjection, serve_mesh_config_projection
from aether.kube import ClusterConfig, KubeClient
from aether.kube.mesh_config import CONFIG_MAPS, MESH_CONFIG_KEY, MESH_CONFIG_MAP, MESH_CONFIGS
from aether.testing.kubeapi import KubeApi, open_kube_api
from aether.testing.kubediscovery import served_resources

WAIT = 20.0


def _mesh_config(namespace: str, spec: dict[str, Any], *, name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "config.aether.io/v1",
        "kind": "MeshConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@pytest.fixture
async def api() -> AsyncIterator[KubeApi]:
    async with open_kube_api(resources=(*served_resources(), MESH_CONFIGS)) as server:
        yield server


async def _wait_until(condition: Callable[[], bool]) -> None:
    with trio.fail_after(WAIT):
        while not condition():  # noqa: ASYNC110 - the condition spans the store and the projection over sockets
            await trio.sleep(0.01)


def _projected(api: KubeApi, namespace: str) -> dict[str, Any] | None:
    found = api.store.get(CONFIG_MAPS, name=MESH_CONFIG_MAP, namespace=namespace)
    return None if found is None else yaml.safe_load(found["data"][MESH_CONFIG_KEY])


async def _start(nursery: trio.Nursery, api: KubeApi, leading: Callable[[], bool]) -> MeshConfigProjection:
    client = KubeClient(ClusterConfig.from_url(api.url))
    started = functools.partial(serve_mesh_config_projection, client, leading=leading, resync=0.05)
    projection: MeshConfigProjection = await nursery.start(started)
    return projection


async def test_each_namespace_gets_its_merged_config_and_edits_follow(api: KubeApi) -> None:
    api.store.create(
        MESH_CONFIGS,
        _mesh_config("aether-system", {"meshDomain": "corp.mesh", "proxy": {"tracingEnabled": True}}),
    )
    api.store.create(MESH_CONFIGS, _mesh_config("shop", {"proxy": {"traceSampleRate": 0.5}}))
    async with trio.open_nursery() as nursery:
        projection = await _start(nursery, api, lambda: True)
        await _wait_until(lambda: _projected(api, "shop") is not None)
        assert _projected(api, "aether-system") == {
            "meshDomain": "corp.mesh",
            "proxy": {"tracingEnabled": True},
        }
        assert _projected(api, "shop") == {
            "meshDomain": "corp.mesh",
            "proxy": {"traceSampleRate": 0.5, "tracingEnabled": True},
        }
        await _wait_until(lambda: projection.statistics().passes >= 5)
        assert projection.statistics().writes == 2  # unchanged passes write nothing
        shop = api.store.get(MESH_CONFIGS, name="default", namespace="shop")
        assert shop is not None
        api.store.update(MESH_CONFIGS, {**shop, "spec": {"onDemandTtlSeconds": 30}})
        await _wait_until(lambda: (_projected(api, "shop") or {}).get("onDemandTtlSeconds") == 30)
        assert _projected(api, "shop") == {
            "meshDomain": "corp.mesh",
            "onDemandTtlSeconds": 30,
            "proxy": {"tracingEnabled": True},
        }
        nursery.cancel_scope.cancel()


async def test_an_invalid_config_keeps_the_last_good_configmap(api: KubeApi) -> None:
    api.store.create(MESH_CONFIGS, _mesh_config("shop", {"meshDomain": "shop.mesh"}))
    async with trio.open_nursery() as nursery:
        projection = await _start(nursery, api, lambda: True)
        await _wait_until(lambda: _projected(api, "shop") is not None)
        shop = api.store.get(MESH_CONFIGS, name="default", namespace="shop")
        assert shop is not None
        api.store.update(MESH_CONFIGS, {**shop, "spec": {"meshDomain": "Not A Domain"}})
        await _wait_until(lambda: projection.statistics().invalid == 1)
        passes = projection.statistics().passes
        await _wait_until(lambda: projection.statistics().passes > passes + 2)
        assert _projected(api, "shop") == {"meshDomain": "shop.mesh"}
        nursery.cancel_scope.cancel()


async def test_a_replica_that_does_not_lead_writes_nothing(api: KubeApi) -> None:
    api.store.create(MESH_CONFIGS, _mesh_config("shop", {"meshDomain": "shop.mesh"}))
    leading = False
    async with trio.open_nursery() as nursery:
        projection = await _start(nursery, api, lambda: leading)
        await _wait_until(lambda: projection.synced)
        rounds = projection.statistics().rounds
        await _wait_until(lambda: projection.statistics().rounds > rounds + 3)
        assert _projected(api, "shop") is None
        assert projection.statistics().passes == 0
        leading = True
        await _wait_until(lambda: _projected(api, "shop") is not None)
        nursery.cancel_scope.cancel()


async def test_the_mesh_config_in_force_is_the_one_projected_into_aether_system(api: KubeApi) -> None:
    """What the pod webhook follows (the inbound check's trust domain, the ndots of the mesh domain): the MeshConfig
    of aether-system's projected ConfigMap (the agents' and the edge's), none before one is projected, the core's
    defaults where it sets none, and an edit's once projected; a namespace's own MeshConfig does not change it."""
    api.store.create(MESH_CONFIGS, _mesh_config("shop", {"trustDomain": "shop.example"}))
    async with trio.open_nursery() as nursery:
        projection = await _start(nursery, api, lambda: True)
        await _wait_until(lambda: _projected(api, "shop") is not None)
        assert projection.mesh_config() is None
        api.store.create(MESH_CONFIGS, _mesh_config("aether-system", {"meshDomain": "corp.mesh"}))
        await _wait_until(lambda: projection.mesh_config() is not None)
        in_force = projection.mesh_config()
        assert in_force is not None
        assert (in_force.trust_domain, in_force.mesh_domain) == ("aether.internal", "corp.mesh")
        fallback = api.store.get(MESH_CONFIGS, name="default", namespace="aether-system")
        assert fallback is not None
        api.store.update(MESH_CONFIGS, {**fallback, "spec": {"trustDomain": "corp.example"}})
        await _wait_until(
            lambda: (config := projection.mesh_config()) is not None and config.trust_domain == "corp.example"
        )
        edited = projection.mesh_config()
        assert edited is not None
        assert edited.mesh_domain == "aether.internal"
        nursery.cancel_scope.cancel()
