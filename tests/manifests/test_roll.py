"""The agent DaemonSet's roll hands a node over without a failed request (issue 20): the old and the new pod overlap
on the node, the new agent stands by on the old one's log, and the new proxy's supervisor hot-restarts from the old
pod's Envoy through node-local paths. Checked on every rendered overlay, with the real parsers of the commands."""

from __future__ import annotations

from pathlib import PurePosixPath

from tests.manifests.rendered import Object, pod_specs
from tests.manifests.test_command_lines import _expanded, _parsed
from tests.needs import needs

pytestmark = needs("kubectl")

SUPERVISOR = ["/opt/aether/bin/aether", "proxy-supervisor"]


def _agent(overlay: list[Object]) -> tuple[Object, Object]:
    [(workload, spec)] = [
        (workload, spec)
        for workload, spec in pod_specs(overlay)
        if workload["metadata"]["name"] == "aether-agent"
    ]
    return workload, spec


def _container(spec: Object, name: str) -> Object:
    [container] = [item for item in spec["containers"] if item["name"] == name]
    return container


def _host_path(spec: Object, container: Object, path: PurePosixPath) -> PurePosixPath | None:
    """The node's path behind `path` in `container` (through its deepest mount there), or None when that mount is
    not a hostPath (or there is none)."""
    volumes = {volume["name"]: volume for volume in spec.get("volumes", ())}
    mounts = [
        mount
        for mount in container.get("volumeMounts", ())
        if path == PurePosixPath(mount["mountPath"]) or PurePosixPath(mount["mountPath"]) in path.parents
    ]
    if not mounts:
        return None
    mount = max(mounts, key=lambda item: len(PurePosixPath(item["mountPath"]).parts))
    volume = volumes[mount["name"]]
    if "hostPath" not in volume or mount.get("readOnly"):
        return None
    return PurePosixPath(volume["hostPath"]["path"]) / path.relative_to(mount["mountPath"])


def test_the_old_and_the_new_agent_pod_overlap_on_a_node(overlay: list[Object]) -> None:
    """maxSurge 1 and maxUnavailable 0: the new pod starts beside the old one, which goes once the new one has
    been available for minReadySeconds (time for the hand-overs to start)."""
    workload, _ = _agent(overlay)
    strategy = workload["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert workload["spec"]["minReadySeconds"] > 0


def test_the_new_agent_stands_by_on_the_old_ones_log_on_the_node(overlay: list[Object]) -> None:
    """The agent starts with --standby, and its log directory (where the lock is) is a writable hostPath, the
    same for both pods."""
    workload, spec = _agent(overlay)
    agent = _container(spec, "agent")
    arguments = _parsed(_expanded(overlay, workload, agent)[1:], "aether-agent agent")
    assert arguments.standby
    assert _host_path(spec, agent, PurePosixPath(arguments.log_dir)) is not None


def test_the_proxy_is_a_supervisor_hot_restarting_through_node_local_paths(overlay: list[Object]) -> None:
    """The proxy container's PID 1 is `aether proxy-supervisor` (no shell in between), for this node (the base id
    comes from its name); its runtime directory (hot-restart socket, epoch) and /dev/shm (Envoy's shared memory)
    are writable hostPaths; the pod's grace period outlasts the old Envoy's drain."""
    workload, spec = _agent(overlay)
    proxy = _container(spec, "proxy")
    assert proxy["command"][:2] == SUPERVISOR
    assert "args" not in proxy
    words = _expanded(overlay, workload, proxy)
    arguments = _parsed(words[1:], "aether-agent proxy")
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in proxy["env"]
    assert "--node-name=$(NODE_NAME)" in proxy["command"]
    assert _host_path(spec, proxy, PurePosixPath(arguments.runtime_dir)) is not None
    assert _host_path(spec, proxy, PurePosixPath("/dev/shm")) is not None
    assert "--disable-hot-restart" not in words
    assert spec["terminationGracePeriodSeconds"] > arguments.parent_shutdown_time_s


def test_the_new_proxy_is_ready_once_its_envoy_serves_the_node(overlay: list[Object]) -> None:
    """The proxy's readiness probe tests for the supervisor's ready file, which is pod-local (a node path would
    be the old pod's file too), on a mount the supervisor can write."""
    workload, spec = _agent(overlay)
    proxy = _container(spec, "proxy")
    arguments = _parsed(_expanded(overlay, workload, proxy)[1:], "aether-agent proxy")
    ready = PurePosixPath(arguments.ready_file)
    assert proxy["readinessProbe"]["exec"]["command"] == ["/usr/bin/test", "-f", str(ready)]
    assert _host_path(spec, proxy, ready) is None
    [mount] = [mount for mount in proxy["volumeMounts"] if PurePosixPath(mount["mountPath"]) == ready.parent]
    assert not mount.get("readOnly")
    [volume] = [volume for volume in spec["volumes"] if volume["name"] == mount["name"]]
    assert "emptyDir" in volume


def test_a_read_only_or_pod_local_mount_is_not_node_local() -> None:
    """The check is real: an emptyDir, a read-only hostPath and no mount at all do not count."""
    spec = {
        "volumes": [
            {"name": "scratch", "emptyDir": {}},
            {"name": "node", "hostPath": {"path": "/run/aether"}},
        ]
    }
    container = {
        "volumeMounts": [
            {"name": "scratch", "mountPath": "/dev/shm"},
            {"name": "node", "mountPath": "/run/aether", "readOnly": True},
        ]
    }
    assert _host_path(spec, container, PurePosixPath("/dev/shm")) is None
    assert _host_path(spec, container, PurePosixPath("/run/aether/proxy")) is None
    assert _host_path(spec, container, PurePosixPath("/var/lib/aether")) is None
    writable = {"volumeMounts": [{"name": "node", "mountPath": "/run/aether"}]}
    assert _host_path(spec, writable, PurePosixPath("/run/aether/proxy")) == PurePosixPath(
        "/run/aether/proxy"
    )
