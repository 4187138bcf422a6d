"""CNI commands through a real collector: the host's `aether-cni` exports nothing itself; it forwards each command
to the agent's plugin socket (`aether.cni.plugin_server`), and the agent times it and exports the timing.

The test speaks the shim's wire from Python (the C executable forwards the same frame: tests/cni/test_shim.py)."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from aether.agent import serve_agent
from aether.cni.wire import PluginRequest, PluginResponse
from aether.testing.envoy import wait_for
from aether.testing.otlp_collector import point_value, telemetry_through_rotel
from tests.cni.conftest import agent_config, dict_lookup, environment, network_config

SERVICE = "aether-agent"
WAIT = 30.0


async def _forward(socket: Path, environ: dict[str, str], stdin: bytes) -> PluginResponse:
    stream = await trio.open_unix_socket(str(socket))
    async with stream:
        await stream.send_all(PluginRequest(environ=environ, stdin=stdin).to_bytes())
        received = b""
        with trio.fail_after(WAIT):
            while chunk := await stream.receive_some():
                received += chunk
    return PluginResponse.from_bytes(received)


async def test_cni_command_timings_reach_a_real_collector(tmp_path: Path, short_dir: Path) -> None:
    """Two VERSIONs and a DEL that succeed, an ADD without a container that fails, an unknown command: the
    histogram counts each by command and result, and the unknown command's name is not let into the metric."""
    config = network_config(short_dir / "cni.sock")
    commands = [
        ({"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.0.0"}', 0),
        ({"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.0.0"}', 0),
        ({"CNI_COMMAND": "ADD"}, b'{"cniVersion": "1.1.0"}', 1),
        (environment("DEL", netns=None), json.dumps(config).encode(), 0),
        ({"CNI_COMMAND": "FROB"}, b'{"cniVersion": "1.0.0"}', 1),
    ]
    async with (
        telemetry_through_rotel(tmp_path / "rotel", service_name=SERVICE, metrics=True) as sink,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(serve_agent, agent_config(short_dir, lookup=dict_lookup({}), ack_wait=0.2))
        for environ, stdin, status in commands:
            response = await _forward(short_dir / "cni-plugin.sock", environ, stdin)
            assert response.status == status, (environ, response)

        async def exported() -> bool:
            await trio.sleep(0.05)
            metric = sink.latest("aether.cni.command.duration", service=SERVICE)
            return metric is not None and sum(p.count for p in metric.histogram.data_points) == 5

        await wait_for(exported, timeout=WAIT)
        nursery.cancel_scope.cancel()
    metric = sink.latest("aether.cni.command.duration", service=SERVICE)
    assert metric is not None
    assert metric.unit == "s"
    for command, result, count in (
        ("VERSION", "ok", 2),
        ("ADD", "failed", 1),
        ("DEL", "ok", 1),
        ("other", "failed", 1),
    ):
        assert point_value(metric, **{"aether.cni.command": command, "aether.cni.result": result}) == count
    assert len(metric.histogram.data_points) == 4
