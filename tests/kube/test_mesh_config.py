"""The MeshConfig as projected and read: the merge over the fallback, deterministic file content, the file read
into the core's MeshConfig with precise refusals, and the file source (events into a real journal's channel; a bad
file keeps the last good config; an unchanged file after a restart appends nothing)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from aether.core.events import Event
from aether.core.events.kube import MeshConfig, MeshConfigUpdated
from aether.kube.mesh_config import (
    MESH_CONFIG_KEY,
    MeshConfigInvalid,
    effective_spec,
    mesh_config_from_text,
    projected_config_map,
    projected_text,
    spec_of,
)
from aether.kube.mesh_config_file import MeshConfigFileSource, serve_mesh_config_file

WAIT = 10.0


def test_a_namespace_overrides_the_fallback_field_by_field() -> None:
    fallback = {"meshDomain": "corp.mesh", "proxy": {"tracingEnabled": True, "traceSampleRate": 0.1}}
    own = {"proxy": {"traceSampleRate": 0.5}}
    assert effective_spec(fallback, own) == {
        "meshDomain": "corp.mesh",
        "proxy": {"tracingEnabled": True, "traceSampleRate": 0.5},
    }
    assert effective_spec(None, own) == own


def test_the_projection_is_deterministic_text() -> None:
    spec = {"trustDomain": "corp", "meshDomain": "corp.mesh", "proxy": {"emitStatsPod": True}}
    reordered = {"proxy": {"emitStatsPod": True}, "meshDomain": "corp.mesh", "trustDomain": "corp"}
    assert projected_text(spec) == projected_text(reordered)
    assert projected_text(spec) == "meshDomain: corp.mesh\nproxy:\n  emitStatsPod: true\ntrustDomain: corp\n"
    config_map = projected_config_map("shop", spec)
    assert config_map["metadata"]["name"] == "aether-mesh-config"
    assert config_map["data"] == {MESH_CONFIG_KEY: projected_text(spec)}


def test_the_file_reads_into_the_cores_mesh_config() -> None:
    text = "meshDomain: corp.mesh\ntrustDomain: corp\nonDemandTtlSeconds: 30\n"
    assert mesh_config_from_text(text, where="f") == MeshConfig(
        mesh_domain="corp.mesh", trust_domain="corp", on_demand_ttl_seconds=30
    )
    assert mesh_config_from_text("{}\n", where="f") == MeshConfig()


def test_the_files_tracing_settings_reach_the_core_in_millionths() -> None:
    traced = mesh_config_from_text("proxy: {tracingEnabled: true, traceSampleRate: 0.25}\n", where="f")
    assert (traced.tracing_enabled, traced.trace_sample_per_million) == (True, 250_000)
    unrated = mesh_config_from_text("proxy: {tracingEnabled: true}\n", where="f")
    assert unrated.trace_sample_per_million == 1_000_000  # Envoy's own default: every request


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("meshDomain: [", "f: not YAML"),
        ("- a list\n", "f: spec: must be of type object"),
        ("onDemandTtlSeconds: 0\n", "f: spec.onDemandTtlSeconds: must be >= 1 (got 0)"),
        ("meshdomain: x\n", "f: spec.meshdomain: unknown field"),
    ],
)
def test_a_bad_file_is_refused_naming_the_field_and_rule(text: str, message: str) -> None:
    with pytest.raises(MeshConfigInvalid) as raised:
        mesh_config_from_text(text, where="f")
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_mesh_config_object_must_be_named_default() -> None:
    with pytest.raises(MeshConfigInvalid, match=r"MeshConfig shop/other: metadata.name: must be 'default'"):
        spec_of({"metadata": {"name": "other", "namespace": "shop"}, "spec": {}})


async def _wait_for(condition: Callable[[], bool]) -> None:
    with trio.fail_after(WAIT):
        while not condition():  # noqa: ASYNC110 - the source polls a file on its own schedule
            await trio.sleep(0.01)


async def test_the_file_source_sends_changes_and_keeps_the_last_good(tmp_path: Path) -> None:
    path = tmp_path / "mesh-config.yaml"
    path.write_text("meshDomain: corp.mesh\n")
    current = MeshConfig()
    received: list[Event] = []
    send, receive = trio.open_memory_channel[Event](0)

    async def consume() -> None:
        nonlocal current
        async with receive:
            async for event in receive:
                assert isinstance(event, MeshConfigUpdated)
                received.append(event)
                current = event.config

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        source: MeshConfigFileSource = await nursery.start(
            lambda task_status: serve_mesh_config_file(
                path, send=send, current=lambda: current, poll_interval=0.01, task_status=task_status
            )
        )
        await _wait_for(lambda: len(received) == 1)
        assert current.mesh_domain == "corp.mesh"
        path.write_text("meshDomain: [broken\n")
        await _wait_for(lambda: source.statistics().failures == 1)
        assert "not YAML" in source.statistics().problem
        assert current.mesh_domain == "corp.mesh"  # the last good stays
        path.write_text("meshDomain: other.mesh\n")
        await _wait_for(lambda: len(received) == 2)
        assert current.mesh_domain == "other.mesh"
        assert source.statistics().problem == ""
        path.unlink()  # the ConfigMap gone: nothing is sent, the config in force stays
        await _wait_for(lambda: source.statistics().readings == 3)
        nursery.cancel_scope.cancel()
    assert [event.source for event in received] == ["meshconfig", "meshconfig"]


async def test_an_unchanged_file_after_a_restart_appends_nothing(tmp_path: Path) -> None:
    path = tmp_path / "mesh-config.yaml"
    path.write_text("meshDomain: corp.mesh\n")
    in_force = MeshConfig(mesh_domain="corp.mesh")
    send, receive = trio.open_memory_channel[Event](1)
    async with trio.open_nursery() as nursery:
        source: MeshConfigFileSource = await nursery.start(
            lambda task_status: serve_mesh_config_file(
                path, send=send, current=lambda: in_force, poll_interval=0.01, task_status=task_status
            )
        )
        assert source.statistics().readings == 1
        assert source.statistics().sent == 0
        nursery.cancel_scope.cancel()
    with pytest.raises(trio.EndOfChannel):  # closed by the source, and nothing was sent on it
        receive.receive_nowait()
