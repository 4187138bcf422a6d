"""Every container's command line is one the real programs accept: `aether`'s own parsers (the ones `aether`
runs, with each role's start-up checks), Envoy in validate mode on the bootstrap `aether bootstrap` writes for it,
and the installer's shell script naming only what the image holds."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import attrs
import pytest

from aether.cli.bootstrap_command import bootstrap_of
from aether.cli.commands import COMMANDS
from aether.cli.main import build_parser
from aether.cli.proxy_supervisor_command import supervisor_config
from aether.envoy.process import find_envoy_binary
from aether.envoy.supervisor import ProxySupervisor
from aether.registrar.backends.etcd import parse_etcd_endpoints
from tests.manifests.rendered import Object, containers, name_of
from tests.needs import needs

pytestmark = needs("kubectl")

AETHER = "/opt/aether/bin/aether"
ENVOY = "/usr/local/bin/envoy"
IMAGE_PREFIX = "/opt/aether"
SHIM_IN_IMAGE = "/opt/aether/libexec/aether-cni"
"""Where the Containerfile copies the host executable (checked by test_containerfile)."""
"""The image's virtualenv (Containerfile): here, this interpreter's `sys.prefix`."""
PENDING_ROLES: dict[str, str] = {}
"""Roles the manifests run that the CLI does not have yet; each must not be in `aether`'s table (so that once it
is, this entry goes and its command line is checked like the others)."""
FIELD_VALUES = {
    "spec.nodeName": "node-1",
    "metadata.name": "aether-edge-5d8f7c9b6-x2x7q",
    "status.hostIP": "10.0.0.11",
    "status.podIP": "10.244.1.7",
}
"""What the kubelet would put in a container's `fieldRef` variables, on a sample node."""
SERVICE_HOST = "10.96.0.10"
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _service_links(objects: list[Object], namespace: str) -> dict[str, str]:
    """The `<NAME>_SERVICE_HOST` and `_PORT` variables the kubelet sets for each Service of `namespace`."""
    links = {}
    for obj in objects:
        if obj["kind"] == "Service" and obj["metadata"].get("namespace") == namespace:
            prefix = obj["metadata"]["name"].upper().replace("-", "_")
            links[f"{prefix}_SERVICE_HOST"] = SERVICE_HOST
            links[f"{prefix}_SERVICE_PORT"] = str(obj["spec"]["ports"][0]["port"])
    return links


def _expanded(objects: list[Object], workload: Object, container: Object) -> list[str]:
    """The container's command line with its `$(VAR)` references expanded, as the kubelet expands them."""
    environment = _service_links(objects, workload["metadata"]["namespace"])
    for variable in container.get("env", ()):
        if "value" in variable:
            environment[variable["name"]] = variable["value"]
        else:
            environment[variable["name"]] = FIELD_VALUES[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    words = [*container.get("command", ()), *container.get("args", ())]
    unknown = sorted({name for word in words for name in _REFERENCE.findall(word)} - set(environment))
    assert unknown == [], f"{name_of(workload)} {container['name']}: $({unknown[0]}) is set by nothing"
    return [_REFERENCE.sub(lambda match: environment[match.group(1)], word) for word in words]


def _parsed(words: list[str], where: str) -> argparse.Namespace:
    """`aether`'s parser on `words` (the command's own parser, as `aether` builds it); fail with its message."""
    parser = build_parser(full={words[0]})
    try:
        return parser.parse_args(words)
    except SystemExit as exit:
        pytest.fail(f"{where}: `aether {' '.join(words)}` is refused (exit {exit.code})")


def _aether_commands(overlay: list[Object]) -> list[tuple[str, list[str]]]:
    found = []
    for workload, _, container in containers(overlay):
        words = _expanded(overlay, workload, container)
        if words[0] == AETHER:
            found.append((f"{name_of(workload)} {container['name']}", words[1:]))
    return found


def test_the_pending_roles_do_not_exist_yet() -> None:
    """A role the manifests run but the CLI lacks stays listed here; once the CLI has it, this test says to check it."""
    names = {command.name for command in COMMANDS}
    assert names & set(PENDING_ROLES) == set(), "remove the role from PENDING_ROLES: check its command line"


def test_every_aether_command_line_parses(overlay: list[Object]) -> None:
    """Each `aether ...` command line is accepted by its role's real parser, with the role's start-up checks."""
    checked = []
    for where, words in _aether_commands(overlay):
        if words[0] in PENDING_ROLES:
            continue
        arguments = _parsed(words, where)
        if words[0] == "bootstrap":
            bootstrap_of(arguments)
        if words[0] == "registrar" and arguments.backend == "etcd":
            assert parse_etcd_endpoints(arguments.etcd_endpoints)
        if words[0] == "registrar" and arguments.backend == "embedded":
            assert arguments.data_dir is not None, f"{where}: --backend embedded needs --data-dir"
        checked.append(words[0])
    assert sorted(set(checked)) == [
        "agent",
        "bootstrap",
        "cni-install",
        "controller",
        "edge",
        "mesh-dns",
        "proxy-supervisor",
        "registrar",
    ]


def test_a_refused_command_line_fails_the_check() -> None:
    """The check is real: a flag the role does not have fails it."""
    with pytest.raises(
        pytest.fail.Exception, match=r"^agent: `aether agent --no-such-flag` is refused \(exit 2\)$"
    ):
        _parsed(["agent", "--no-such-flag"], "agent")


def _envoy_command(words: list[str], where: str, tmp_path: Path) -> tuple[str, list[str]]:
    """The Envoy command line of a proxy container (Envoy itself, or the one `aether proxy-supervisor` starts at
    its first epoch, the runtime directory moved under `tmp_path`) and the bootstrap path in it."""
    if words[0] == ENVOY:
        return words[words.index("--config-path") + 1], [str(find_envoy_binary()), *words[1:]]
    arguments = _parsed(words[1:], where)
    config = attrs.evolve(supervisor_config(arguments), runtime_dir=tmp_path / "run")
    return str(config.bootstrap), ProxySupervisor(config).envoy_command(0)


def test_every_proxy_validates_on_its_bootstrap(overlay: list[Object], tmp_path: Path) -> None:
    """Each Envoy container (or the Envoy its `aether proxy-supervisor` runs), run with `--mode validate` on what
    its pod's `aether bootstrap` writes, passes."""
    validated = []
    for workload, spec, container in containers(overlay):
        words = _expanded(overlay, workload, container)
        if words[0] != ENVOY and words[:2] != [AETHER, "proxy-supervisor"]:
            continue
        [init] = [item for item in spec["initContainers"] if item["name"] == "bootstrap"]
        arguments = _parsed(_expanded(overlay, workload, init)[1:], f"{name_of(workload)} bootstrap")
        config_path, envoy = _envoy_command(words, f"{name_of(workload)} {container['name']}", tmp_path)
        assert str(arguments.output) == config_path, f"{name_of(workload)}: Envoy reads what bootstrap writes"
        local = tmp_path / f"{workload['metadata']['name']}.json"
        local.write_text(json.dumps(bootstrap_of(arguments)))
        command = [str(local) if word == config_path else word for word in envoy]
        done = subprocess.run(
            [*command, "--mode", "validate"], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{name_of(workload)} proxy: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        validated.append(workload["metadata"]["name"])
    assert sorted(validated) == ["aether-agent", "aether-edge"]


def test_the_cni_installer_installs_the_images_executable_into_the_mounted_host_paths(
    overlay: list[Object],
) -> None:
    """`aether cni-install` copies the executable the Containerfile's shim stage puts in the image, into the host's
    CNI bin directory, and chains it into the host's CNI config directory, as the container mounts them."""
    [(workload, container)] = [
        (workload, container)
        for workload, _, container in containers(overlay)
        if container["name"] == "install-cni"
    ]
    arguments = _parsed(_expanded(overlay, workload, container)[1:], f"{name_of(workload)} install-cni")
    assert str(arguments.plugin) == SHIM_IN_IMAGE
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert str(arguments.bin_dir) in mounts
    assert str(arguments.net_dir.parent) in mounts
    assert (arguments.once, arguments.uninstall) == (False, False), "the container watches until stopped"
