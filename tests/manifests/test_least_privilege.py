"""Least privilege, checked on every rendered overlay: non-root, read-only root filesystems, every capability
dropped but the few a role needs (each named in a comment of its manifest), host access only where a role needs
it, API tokens only for the roles that read the API, and RBAC exactly `aether.kube.access`'s table."""

from __future__ import annotations

from collections.abc import Iterator

from aether.kube.access import ROLE_ACCESS, Rule
from tests.manifests.rendered import MANIFESTS, Object, containers, name_of, pod_specs
from tests.needs import needs

pytestmark = needs("kubectl")

ADDED_CAPABILITIES = {
    ("aether-agent", "agent"): ("NET_ADMIN", "SYS_ADMIN"),
    ("aether-agent", "proxy"): ("NET_ADMIN", "SYS_ADMIN"),
}
"""(workload, container) → the capabilities it adds; every other container adds none. The same containers run as
uid 0 (Kubernetes gives added capabilities to root only), and so do those of `ROOT_WITHOUT_CAPABILITIES`."""
ROOT_WITHOUT_CAPABILITIES = {("aether-agent", "install-cni")}
"""uid 0 with every capability dropped: the CNI installer writes the host's root-owned /opt/cni/bin and
/etc/cni/net.d as their owner."""
HOST_NETWORK = {"aether-mesh-dns"}
"""mesh-dns answers on the node's IP, where the pods' DNS is DNATed."""
HOST_PATHS = {
    # /run/aether/envoy-shm: Envoy's hot-restart shared memory, shared by the old and the new pod of a roll.
    "aether-agent": {
        "/etc/cni",
        "/opt/cni/bin",
        "/run/aether",
        "/run/aether/envoy-shm",
        "/var/lib/aether",
        "/var/run/netns",
    },
    "aether-mesh-dns": {"/run/aether/dns"},
}
ALL_INTERFACES = {
    ("aether-registrar", "--listen=:18090"),
}
"""The only arguments binding every interface: roles that serve the network (agents, the API server)."""


def _policy_rules(rules: list[Object]) -> set[Rule]:
    found = set()
    for rule in rules:
        for group in rule.get("apiGroups", ()):
            found.add(
                Rule(api_group=group, resources=tuple(sorted(rule["resources"])), verbs=tuple(rule["verbs"]))
            )
    return found


def _bound_rules(overlay: list[Object]) -> Iterator[tuple[tuple[str, str], set[Rule]]]:
    """Each ServiceAccount of aether-system bound to a role, and where (`*`: cluster-wide, else the RoleBinding's
    namespace), with the rules of the roles bound to it there."""
    roles = {(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]): obj for obj in overlay}
    granted: dict[tuple[str, str], set[Rule]] = {}
    for binding in overlay:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        reference = binding["roleRef"]
        namespace = None if reference["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
        role = roles[(reference["kind"], namespace, reference["name"])]
        for subject in binding["subjects"]:
            assert (subject["kind"], subject["namespace"]) == ("ServiceAccount", "aether-system"), name_of(
                binding
            )
            where = "*" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
            granted.setdefault((subject["name"], where), set()).update(_policy_rules(role["rules"]))
    yield from sorted(granted.items())


def test_rbac_grants_exactly_what_the_code_reads(overlay: list[Object]) -> None:
    """Each ServiceAccount's bound rules are its row of aether.kube.access: cluster-wide what it watches and the
    status it writes, and in one namespace what it does there (the controller's Lease)."""
    granted = dict(_bound_rules(overlay))
    accounts = {account for account, _ in granted}
    expected = {}
    for account, access in ROLE_ACCESS.items():
        if account not in accounts:
            continue
        expected[(account, "*")] = set(access.rules())
        for namespace, rules in access.namespace_rules().items():
            expected[(account, namespace)] = set(rules)
    assert granted == expected
    assert {"aether-agent", "aether-controller", "aether-edge"} <= accounts


def test_only_roles_that_read_the_api_get_a_token(overlay: list[Object]) -> None:
    """A pod mounts an API token only when its ServiceAccount is bound to rules."""
    bound = dict(_bound_rules(overlay))
    accounts = {obj["metadata"]["name"]: obj for obj in overlay if obj["kind"] == "ServiceAccount"}
    mounted = {}
    for workload, spec in pod_specs(overlay):
        account = accounts[spec["serviceAccountName"]]
        mounted[workload["metadata"]["name"]] = spec.get(
            "automountServiceAccountToken", account.get("automountServiceAccountToken", True)
        )
    readers = ["aether-agent", "aether-controller", "aether-edge"]
    assert sorted(name for name, token in mounted.items() if token) == readers
    assert sorted({account for account, _ in bound}) == readers


def test_every_container_is_locked_down(overlay: list[Object]) -> None:
    """Every container: no privilege escalation, read-only root filesystem, every capability dropped, and only the
    table's additions; non-root unless it adds capabilities; the pod non-root with the runtime's seccomp profile."""
    problems = []
    for workload, spec, container in containers(overlay):
        where = f"{name_of(workload)} {container['name']}"
        pod = spec["securityContext"]
        context = container["securityContext"]
        added = tuple(context["capabilities"].get("add", ()))
        key = (workload["metadata"]["name"], container["name"])
        if (pod.get("runAsNonRoot"), pod.get("seccompProfile")) != (True, {"type": "RuntimeDefault"}):
            problems.append(f"{where}: the pod must be runAsNonRoot with seccomp RuntimeDefault")
        if context.get("allowPrivilegeEscalation") is not False or context.get("privileged"):
            problems.append(f"{where}: privilege escalation")
        if context.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: writable root filesystem")
        if context["capabilities"].get("drop") != ["ALL"]:
            problems.append(f"{where}: capabilities not all dropped")
        if added != ADDED_CAPABILITIES.get(key, ()):
            problems.append(f"{where}: adds {added!r}")
        root = context.get("runAsUser", pod.get("runAsUser")) == 0
        if root != (key in ADDED_CAPABILITIES or key in ROOT_WITHOUT_CAPABILITIES) or (
            root and context.get("runAsNonRoot") is not False
        ):
            problems.append(f"{where}: runs as root without needing a capability (or the reverse)")
    assert problems == []


def test_every_added_capability_is_explained_in_its_manifest() -> None:
    """Each added capability is named in a comment of the manifest that adds it (the reason lives beside it)."""
    comments = "\n".join(
        line
        for line in (MANIFESTS / "base" / "agent.yaml").read_text().splitlines()
        if line.strip().startswith("#")
    )
    missing = [
        capability
        for capabilities in ADDED_CAPABILITIES.values()
        for capability in capabilities
        if capability not in comments
    ]
    assert missing == []


def test_host_access_only_where_a_role_needs_it(overlay: list[Object]) -> None:
    """Host network for mesh-dns only, no host PID or IPC, and host paths from the table only."""
    network, paths = set(), {}
    for workload, spec in pod_specs(overlay):
        name = workload["metadata"]["name"]
        assert not spec.get("hostPID"), name
        assert not spec.get("hostIPC"), name
        if spec.get("hostNetwork"):
            network.add(name)
        host = {volume["hostPath"]["path"] for volume in spec.get("volumes", ()) if "hostPath" in volume}
        if host:
            paths[name] = host
    assert network == HOST_NETWORK
    assert paths == HOST_PATHS


def test_nothing_binds_all_interfaces_but_network_servers(overlay: list[Object]) -> None:
    """Only the registrar and the controller listen on every interface; mesh-dns binds $HOST_IP, Envoy's admin
    API loopback."""
    found = {
        (workload["metadata"]["name"], word)
        for workload, _, container in containers(overlay)
        for word in container.get("command", ())
        if "=:" in word or "0.0.0.0" in word or "[::]" in word
    }
    assert found == ALL_INTERFACES
