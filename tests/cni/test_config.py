"""Reading one invocation: the CNI_* environment and the network config, with the spec's error codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aether.cni.config import Command, Invocation, NetworkConfig, PodArgs
from aether.cni.errors import (
    CniError,
    DecodeFailure,
    IncompatibleVersion,
    InvalidEnvironment,
    InvalidNetworkConfig,
)


def test_the_environment_names_the_pod_from_cni_args() -> None:
    """K8S_POD_* in CNI_ARGS name the pod; other CNI_* fill the invocation."""
    invocation = Invocation.from_environ(
        {
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": "c1",
            "CNI_NETNS": "/run/netns/p",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1;K8S_POD_UID=u1;K8S_POD_INFRA_CONTAINER_ID=c1",
        }
    )
    assert invocation == Invocation(
        command=Command.ADD,
        container_id="c1",
        netns=Path("/run/netns/p"),
        ifname="eth0",
        pod=PodArgs(namespace="shop", name="web-1", uid="u1"),
    )
    assert (
        Invocation.from_environ({"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}).netns
        is None
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "CNI_COMMAND must be one of ADD, DEL, CHECK, GC, STATUS, VERSION (got '')"),
        (
            {"CNI_COMMAND": "ADD", "CNI_IFNAME": "eth0", "CNI_NETNS": "/n"},
            "CNI_CONTAINERID must be set for ADD (got None)",
        ),
        (
            {"CNI_COMMAND": "CHECK", "CNI_CONTAINERID": "c", "CNI_IFNAME": "e"},
            "CNI_NETNS must be set for CHECK (got None)",
        ),
        (
            {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_IFNAME": "e", "CNI_NETNS": "netns"},
            "CNI_NETNS must be an absolute path (got 'netns')",
        ),
    ],
)
def test_a_missing_or_bad_variable_is_an_invalid_environment(environ: dict[str, str], message: str) -> None:
    """Code 4, naming the variable and the value."""
    with pytest.raises(
        InvalidEnvironment, match=rf"^{message}$".replace("(", r"\(").replace(")", r"\)")
    ) as caught:
        Invocation.from_environ(environ)
    assert caught.value.code == 4


def test_the_network_config_reads_our_keys_and_the_runtimes() -> None:
    """Our keys with their defaults filled, prevResult IPv4 addresses, pod annotations and valid attachments."""
    config = NetworkConfig.from_json(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "net",
                "meshDNS": "10.0.0.5",
                "excludeOutboundPorts": [22, "9090"],
                "excludeOutboundIPRanges": ["10.1.0.0/16"],
                "prevResult": {"ips": [{"address": "10.88.0.2/24"}, {"address": "fd00::2/64"}, {"bad": 1}]},
                "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"a": "b"}},
                "cni.dev/valid-attachments": [{"containerID": "c2", "ifname": "eth0"}, {"containerID": "c1"}],
            }
        ).encode()
    )
    assert config == NetworkConfig(
        cni_version="1.0.0",
        name="net",
        mesh_dns=("10.0.0.5", 18054),
        exclude_ports=(22, 9090),
        exclude_ranges=("10.1.0.0/16",),
        prev_result={"ips": [{"address": "10.88.0.2/24"}, {"address": "fd00::2/64"}, {"bad": 1}]},
        pod_annotations={"a": "b"},
        valid_container_ids=("c1", "c2"),
    )
    assert config.pod_ips == ("10.88.0.2",)


@pytest.mark.parametrize(
    ("content", "error", "code", "message"),
    [
        (b"", DecodeFailure, 6, "network config: stdin is empty; the runtime must pass the config as JSON"),
        (b"{nope", DecodeFailure, 6, "network config: stdin is not JSON"),
        (b"[1]", DecodeFailure, 6, "network config: must be a JSON object (got list)"),
        (b"{}", InvalidNetworkConfig, 7, "network config: 'cniVersion' must be a version string (got None)"),
        (
            b'{"cniVersion": "0.3.1"}',
            IncompatibleVersion,
            1,
            "network config: cniVersion '0.3.1' is not supported",
        ),
        (
            b'{"cniVersion": "1.1.0", "meshDNS": "dns.local"}',
            InvalidNetworkConfig,
            7,
            "network config: 'meshDNS' must be 'IPv4[:port]' such as '10.0.0.5:18054' (got 'dns.local')",
        ),
        (
            b'{"cniVersion": "1.1.0", "excludeOutboundPorts": [0]}',
            InvalidNetworkConfig,
            7,
            "network config: 'excludeOutboundPorts': a port must be 1..65535 (got '0')",
        ),
        (
            b'{"cniVersion": "1.1.0", "agentSocket": "cni.sock"}',
            InvalidNetworkConfig,
            7,
            "network config: 'agentSocket' must be an absolute path (got 'cni.sock')",
        ),
        (
            b'{"cniVersion": "1.1.0", "agentSocket": "/run/' + b"a" * 120 + b'.sock"}',
            InvalidNetworkConfig,
            7,
            f"network config: 'agentSocket': listen address 'unix:/run/{'a' * 120}.sock': the unix socket path "
            "must be at most 107 bytes (got 130)",
        ),
        (
            b'{"cniVersion": "1.1.0", "agentTimeoutSeconds": true}',
            InvalidNetworkConfig,
            7,
            "network config: 'agentTimeoutSeconds' must be a number in (0, 300] (got True)",
        ),
        (
            b'{"cniVersion": "1.1.0", "prevResult": []}',
            InvalidNetworkConfig,
            7,
            "network config: 'prevResult' must be an object (got [])",
        ),
    ],
)
def test_bad_network_configs_get_the_specs_codes(
    content: bytes, error: type[CniError], code: int, message: str
) -> None:
    """Each broken config raises the error whose code the spec gives it, naming the key and the value."""
    with pytest.raises(error) as caught:
        NetworkConfig.from_json(content)
    assert (caught.value.code, caught.value.message) == (code, message)
