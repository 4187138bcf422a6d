"""Where a role's identities come from (`aether.cli.spiffe_options`): the SPIFFE sockets from the flags, else from
the environment variables the SPIFFE specs name; a bad value or a broker without a Workload API is refused naming
the variable or the flag. And `aether bootstrap --spiffe-workload-socket` declares SPIRE's SDS cluster there."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from aether.cli import main
from aether.cli.spiffe_options import add_spiffe_arguments, spiffe_sockets
from aether.envoy.bootstrap import SPIRE_SDS_CLUSTER


def _sockets(*argv: str) -> tuple[Path | None, Path | None]:
    parser = argparse.ArgumentParser()
    add_spiffe_arguments(parser)
    return spiffe_sockets(parser.parse_args(argv))


@pytest.fixture(autouse=True)
def _no_spiffe_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPIFFE_ENDPOINT_SOCKET", raising=False)
    monkeypatch.delenv("SPIFFE_BROKER_SOCKET", raising=False)


def test_the_sockets_default_from_the_environment_and_the_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _sockets() == (None, None)
    monkeypatch.setenv("SPIFFE_ENDPOINT_SOCKET", "unix:///run/spire/agent.sock")
    monkeypatch.setenv("SPIFFE_BROKER_SOCKET", "unix:/run/spire/broker.sock")
    assert _sockets() == (Path("/run/spire/agent.sock"), Path("/run/spire/broker.sock"))
    flags = ("--spiffe-workload-socket", "/w.sock", "--spiffe-broker-socket", "/b.sock")
    assert _sockets(*flags) == (Path("/w.sock"), Path("/b.sock"))


@pytest.mark.parametrize(
    ("environment", "argv", "message"),
    [
        (
            {"SPIFFE_ENDPOINT_SOCKET": "tcp://127.0.0.1:8081"},
            (),
            "SPIFFE_ENDPOINT_SOCKET='tcp://127.0.0.1:8081': want unix:///absolute/path of the SPIFFE Workload API"
            " socket",
        ),
        (
            {"SPIFFE_BROKER_SOCKET": "unix:relative.sock"},
            (),
            "SPIFFE_BROKER_SOCKET='relative.sock': want unix:///absolute/path of the SPIFFE Broker API socket",
        ),
        ({}, ("--spiffe-broker-socket", "/b.sock"), "--spiffe-broker-socket needs --spiffe-workload-socket"),
    ],
    ids=["workload-over-tcp", "broker-relative", "broker-without-workload"],
)
def test_a_socket_that_cannot_serve_is_refused_naming_it(
    environment: dict[str, str], argv: tuple[str, ...], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        _sockets(*argv)


def test_the_edge_bootstrap_declares_the_spire_agent_socket_as_its_sds_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bootstrap", "--node-name", "edge-0", "--spiffe-workload-socket", "/run/spire/agent.sock"]
    assert main(argv) == 0
    clusters = json.loads(capsys.readouterr().out)["static_resources"]["clusters"]
    [spire] = [cluster for cluster in clusters if cluster["name"] == SPIRE_SDS_CLUSTER]
    [endpoint] = spire["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert endpoint["endpoint"]["address"] == {"pipe": {"path": "/run/spire/agent.sock"}}
