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


def _config(**prev: object) -> bytes:
    return json.dumps(
        {"cniVersion": "1.0.0", "name": "net", "prevResult": {"cniVersion": "1.0.0", **prev}}
    ).encode()


@pytest.mark.parametrize(
    ("env", "stdin", "expected"),
    [
        pytest.param(
            ADD,
            b"[" * 100_000,
            {
                "cniVersion": "1.1.0",
                "code": 6,
                "msg": "network config: stdin nests arrays or objects too deeply to decode",
                "details": "100000 bytes starting b'[[[[[[[[[[[[[[[[[[[['",
            },
            id="nesting",
        ),
        pytest.param(
            ADD,
            b'{"cniVersion": "1.0.0", "agentTimeoutSeconds": ' + b"7" * 5001 + b"}",
            {
                "cniVersion": "1.1.0",
                "code": 6,
                "msg": "network config: a number on stdin has 5001 digits, more than 100",
                "details": "77777777777777777777... (5001 digits)",
            },
            id="long-integer",
        ),
        pytest.param(
            ADD,
            _config(ips={"address": "10.0.0.5/24"}),
            {
                "cniVersion": "1.0.0",
                "code": 7,
                "msg": "network config: 'prevResult.ips' must be a list (got dict)",
                "details": "{'address': '10.0.0.5/24'}",
            },
            id="ips-not-a-list",
        ),
        pytest.param(
            ADD | {"CNI_NETNS": "/run/netns/" + "n" * 300},
            _config(ips=[]),
            {
                "cniVersion": "1.0.0",
                "code": 4,
                "msg": "CNI_NETNS must be a path whose components have at most 255 bytes (one has 300)",
                "details": f"311 bytes starting {'/run/netns/' + 'n' * 29!r}",
            },
            id="netns-name-too-long",
        ),
    ],
)
async def test_input_past_any_bound_is_answered_with_a_precise_error_object(
    env: dict[str, str], stdin: bytes, expected: dict[str, object]
) -> None:
    """Deep nesting, a 5,001-digit integer, a prevResult whose ips are not a list of addresses and a CNI_NETNS
    component past NAME_MAX: the spec's error object with the right code, never "this is a bug"."""
    assert await run_cni_process(env, stdin) == PluginRun(status=1, output=expected)
