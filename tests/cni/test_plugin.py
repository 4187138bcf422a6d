"""The real `aether-cni` executable on bad input: the spec's JSON error object on stdout, exit status 1."""

from __future__ import annotations

import json

import pytest

from tests.cni.conftest import PluginRun, environment, run_cni_process

ADD = environment("ADD", netns=None) | {"CNI_NETNS": "/run/netns/never-made"}


async def test_version_lists_the_supported_versions() -> None:
    """VERSION answers with the config's version (when we speak it) and every version we support."""
    run = await run_cni_process({"CNI_COMMAND": "VERSION"}, b'{"cniVersion": "1.0.0"}')
    assert run == PluginRun(
        status=0, output={"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"]}
    )


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        (
            b"",
            {
                "cniVersion": "1.1.0",
                "code": 6,
                "msg": "network config: stdin is empty; the runtime must pass the config as JSON",
            },
        ),
        (
            b'{"cniVersion": "1.1.0",',
            {
                "cniVersion": "1.1.0",
                "code": 6,
                "msg": "network config: stdin is not JSON",
                "details": "Expecting property name enclosed in double quotes: line 1 column 24 (char 23)",
            },
        ),
        (
            b'{"cniVersion": "9.9.9", "name": "net"}',
            {
                "cniVersion": "1.1.0",
                "code": 1,
                "msg": "network config: cniVersion '9.9.9' is not supported",
                "details": "supported: 0.4.0, 1.0.0, 1.1.0",
            },
        ),
        (
            json.dumps({"cniVersion": "1.0.0", "name": "net"}).encode(),
            {
                "cniVersion": "1.0.0",
                "code": 7,
                "msg": "network config: 'prevResult' is missing; aether-cni is a chained plugin: list it after"
                " the plugin that assigns the pod's addresses",
            },
        ),
    ],
)
async def test_bad_stdin_is_answered_with_the_specs_error_object(
    stdin: bytes, expected: dict[str, object]
) -> None:
    """Missing, malformed, unknown-version and unchained configs: codes 6, 6, 1 and 7."""
    assert await run_cni_process(ADD, stdin) == PluginRun(status=1, output=expected)


async def test_a_missing_command_is_an_invalid_environment() -> None:
    """Without CNI_COMMAND the plugin answers code 4."""
    run = await run_cni_process({}, b'{"cniVersion": "1.1.0"}')
    assert run == PluginRun(
        status=1,
        output={
            "cniVersion": "1.1.0",
            "code": 4,
            "msg": "CNI_COMMAND must be one of ADD, DEL, CHECK, GC, STATUS, VERSION (got '')",
        },
    )


async def test_a_container_that_is_not_a_kubernetes_pod_is_passed_through() -> None:
    """Without K8S_POD_NAME in CNI_ARGS, ADD returns the previous result and contacts nobody."""
    env = ADD | {"CNI_ARGS": "IgnoreUnknown=1"}
    config = {
        "cniVersion": "1.1.0",
        "name": "net",
        "agentSocket": "/nonexistent.sock",
        "prevResult": {"ips": []},
    }
    assert await run_cni_process(env, config) == PluginRun(
        status=0, output={"cniVersion": "1.1.0", "ips": []}
    )
