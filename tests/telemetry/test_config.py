"""`--otlp-endpoint` and the signal flags: parsed at start, refused with the reason; off loads no SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aether.cli import main
from aether.telemetry import OtlpEndpoint, TelemetryConfig, telemetry_running


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("http://127.0.0.1:4318", OtlpEndpoint(scheme="http", host="127.0.0.1", port=4318)),
        ("http://collector", OtlpEndpoint(scheme="http", host="collector", port=4318)),
        ("https://[::1]:9000/", OtlpEndpoint(scheme="https", host="::1", port=9000)),
    ],
)
def test_an_endpoint_parses(text: str, endpoint: OtlpEndpoint) -> None:
    assert OtlpEndpoint.parse(text) == endpoint
    assert OtlpEndpoint.parse(str(endpoint)) == endpoint


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("127.0.0.1:4318", "scheme"),
        ("grpc://collector:4317", "scheme grpc"),
        ("http://:4318", "no host"),
        ("http://collector:port", "Port could not be cast"),
        ("http://collector:99999", "out of range"),
        ("http://collector:0", "port 0"),
        ("http://user:secret@collector", "credentials"),
        ("http://collector:4318/v1/metrics", "without a path"),
    ],
)
def test_an_endpoint_that_does_not_parse_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match="--otlp-endpoint") as raised:
        OtlpEndpoint.parse(text)
    assert reason in str(raised.value)


def test_a_role_refuses_a_bad_endpoint_at_start(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """argparse refuses it before the role opens anything (its log directory stays uncreated)."""
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "agent",
                "--node-name",
                "n",
                "--log-dir",
                str(tmp_path / "log"),
                "--otlp-endpoint",
                "collector:4318",
            ]
        )
    assert exited.value.code == 2
    assert "scheme" in capsys.readouterr().err
    assert not (tmp_path / "log").exists()


def test_a_signal_without_an_endpoint_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["mesh-dns", "--records", str(tmp_path / "r.json"), "--listen", "127.0.0.1:0", "--otel-enabled"])
    assert exited.value.code == 2
    assert "need --otlp-endpoint" in capsys.readouterr().err


def test_off_creates_nothing_and_loads_no_sdk() -> None:
    """With telemetry off, a plane, an xDS server and their instruments never import OpenTelemetry."""
    code = """
import sys
from aether.telemetry import TelemetryConfig, telemetry_running, JournalMetrics, current_telemetry, change_tracer
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer
import aether.plane.plane
with telemetry_running(TelemetryConfig(service_name="aether-test")) as telemetry:
    XdsServer(SnapshotCache())
    assert change_tracer(telemetry) is None and JournalMetrics.of(telemetry).recording is False
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
assert not loaded, loaded
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_without_a_signal_telemetry_stays_off() -> None:
    config = TelemetryConfig(service_name="aether-test", endpoint=OtlpEndpoint.parse("http://127.0.0.1:1"))
    with telemetry_running(config) as telemetry:
        assert telemetry.meter is None
        assert telemetry.tracer is None
