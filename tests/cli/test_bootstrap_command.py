"""`aether bootstrap`: the ADS bootstrap the node proxy starts with, which Envoy itself accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aether.cli import main
from aether.envoy import ads_bootstrap
from aether.testing.envoy import validate_config


def _printed(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["bootstrap", *argv]) == 0
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def test_the_bootstrap_is_the_demos_delta_ads_bootstrap(capsys: pytest.CaptureFixture[str]) -> None:
    """What it prints is what `aether demo` starts its Envoy with: one builder, Delta ADS over the agent's socket."""
    printed = _printed(capsys, "--node-name", "node-1", "--xds", "unix:/run/aether/xds.sock")
    assert printed == ads_bootstrap(
        node_id="node-1", xds_unix_socket=Path("/run/aether/xds.sock"), delta=True
    )


@pytest.mark.parametrize(
    "xds", ["unix:/run/aether/xds.sock", "127.0.0.1:18000", "[::1]:18000"], ids=["unix", "ipv4", "ipv6"]
)
def test_envoy_validates_the_bootstrap(capsys: pytest.CaptureFixture[str], tmp_path: Path, xds: str) -> None:
    """`envoy --mode validate` accepts the bootstrap, over a Unix socket or TCP, admin on a fixed loopback port."""
    printed = _printed(capsys, "--node-name", "node-1", "--xds", xds, "--admin", "127.0.0.1:9901")
    validate_config(printed, tmp_path, what=f"the bootstrap for --xds {xds}")


def test_output_writes_the_file_whole(tmp_path: Path) -> None:
    """`--output FILE` writes the same document, and leaves no partial file beside it."""
    target = tmp_path / "bootstrap.json"
    assert main(["bootstrap", "--node-name", "node-1", "--output", str(target)]) == 0
    assert json.loads(target.read_text())["node"]["id"] == "node-1"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bootstrap.json"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--admin", "0.0.0.0:9901"],
            "aether: error: --admin: Envoy's admin API listens on loopback only: give 127.0.0.1:PORT"
            " (got '0.0.0.0:9901')\n",
        ),
        (
            ["--xds", ":18000"],
            "aether: error: --xds: give the address Envoy dials, not all interfaces (got ':18000')\n",
        ),
        (["--node-name", " "], "aether: error: --node-name must not be empty (Envoy's node id)\n"),
    ],
    ids=["admin-on-all-interfaces", "xds-on-all-interfaces", "empty-node-name"],
)
def test_options_that_make_no_bootstrap_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Each is refused with exit 2 and one line naming the option, the rule and the value."""
    assert main(["bootstrap", "--node-name", "node-1", *argv]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", message)


def test_an_otlp_endpoint_adds_envoys_opentelemetry_stats_sink_which_envoy_accepts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--otlp-endpoint http://HOST[:PORT]` (OTLP/gRPC, port 4317 by default): the sink and its cluster, validated."""
    printed = _printed(capsys, "--node-name", "node-1", "--otlp-endpoint", "http://collector.example")
    assert printed == ads_bootstrap(
        node_id="node-1",
        xds_unix_socket=Path("/run/aether/xds.sock"),
        delta=True,
        otlp_grpc=("collector.example", 4317),
    )
    sinks = printed["stats_sinks"]
    assert isinstance(sinks, list)
    assert [sink["name"] for sink in sinks] == ["envoy.stat_sinks.open_telemetry"]
    validate_config(printed, tmp_path, what="the bootstrap with an OpenTelemetry stats sink")


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("https://collector:4317", "cleartext gRPC"),
        ("collector:4317", "scheme"),
        ("http://c:4317/v1", "path"),
    ],
)
def test_an_otlp_endpoint_envoy_cannot_dial_is_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str], endpoint: str, reason: str
) -> None:
    assert main(["bootstrap", "--node-name", "node-1", "--otlp-endpoint", endpoint]) == 2
    error = capsys.readouterr().err
    assert "--otlp-endpoint" in error
    assert reason in error
