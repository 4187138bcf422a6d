"""A role as a real process exports through a real collector: `aether registrar --otlp-endpoint ... --otel-enabled`
serves N registrations and a watch (a full resync), and its metrics reach the sink behind rotel."""

from __future__ import annotations

from pathlib import Path

import trio

from aether.testing.envoy import wait_for
from aether.testing.otlp_collector import OtlpSink, open_otlp_sink, open_rotel, point_value
from tests.cli.test_registrar_command import _start
from tests.registrar._grpc import register, watching

REGISTRATIONS = 3
SERVICE = "aether-registrar"


async def _has(sink: OtlpSink, name: str, value: float, **attributes: str) -> bool:
    await trio.lowlevel.checkpoint()
    metric = sink.latest(name, service=SERVICE)
    return metric is not None and point_value(metric, **attributes) == value


async def test_the_registrar_exports_its_metrics_through_a_real_collector(tmp_path: Path) -> None:
    socket = tmp_path / "registrar.sock"
    with open_otlp_sink() as sink:
        async with open_rotel(sink, work_dir=tmp_path / "rotel") as collector:
            process = await trio.to_thread.run_sync(
                lambda: _start(
                    socket,
                    "--data-dir",
                    str(tmp_path / "data"),
                    "--otlp-endpoint",
                    collector.http_url,
                    "--otel-enabled",
                    "--otel-export-interval",
                    "0.2",
                )
            )
            try:
                for index in range(REGISTRATIONS):
                    await register(socket, f"10.0.0.{index + 1}")
                async with watching(socket, cluster_name="c", node_name="n") as watch:
                    await watch.until_complete()
                    await wait_for(lambda: _has(sink, "aether.registrar.watchers", 1), timeout=20)
                await wait_for(
                    lambda: _has(
                        sink, "aether.registrar.watch.resyncs", 1, **{"aether.registrar.side": "registrar"}
                    ),
                    timeout=20,
                )
                await wait_for(
                    lambda: _has(sink, "aether.registrar.store.write.duration", REGISTRATIONS), timeout=20
                )
            finally:
                # Every value asserted was awaited above (exported every 0.2 s): no final flush is needed.
                process.kill()
                await trio.to_thread.run_sync(process.communicate)
    units = {name: metrics[-1].unit for name, metrics in sink.metrics(service=SERVICE).items()}
    assert units["aether.registrar.store.write.duration"] == "s"
    assert units["aether.registrar.fan_out.duration"] == "s"
    assert units["aether.registrar.watchers"] == "{watcher}"
    assert units["aether.registrar.watch.resyncs"] == "{resync}"
    store = sink.latest("aether.registrar.store.available", service=SERVICE)
    assert store is not None
    assert point_value(store) == 1
