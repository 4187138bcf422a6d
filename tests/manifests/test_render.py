"""`kubectl kustomize` renders every overlay; the etcd overlay refuses to render without the etcd it needs."""

from __future__ import annotations

from pathlib import Path

from tests.manifests.rendered import MANIFESTS, OVERLAYS, Object, kustomize, name_of, prepared_manifests
from tests.needs import needs

pytestmark = needs("kubectl")

EXPECTED = {
    "Namespace aether-system",
    "CustomResourceDefinition meshconfigs.config.aether.io",
    "CustomResourceDefinition edgeconfigs.config.aether.io",
    "ServiceAccount aether-system/aether-agent",
    "ServiceAccount aether-system/aether-controller",
    "ServiceAccount aether-system/aether-edge",
    "ServiceAccount aether-system/aether-mesh-dns",
    "ServiceAccount aether-system/aether-registrar",
    "ClusterRole aether-agent",
    "ClusterRoleBinding aether-agent",
    "ClusterRole aether-controller",
    "ClusterRoleBinding aether-controller",
    "ClusterRole aether-edge",
    "ClusterRoleBinding aether-edge",
    "Role aether-system/aether-controller-leader-election",
    "RoleBinding aether-system/aether-controller-leader-election",
    "Role aether-system/aether-controller-webhooks",
    "RoleBinding aether-system/aether-controller-webhooks",
    "Service aether-system/aether-controller",
    "Service aether-system/aether-edge",
    "Service aether-system/aether-registrar",
    "Deployment aether-system/aether-controller",
    "Deployment aether-system/aether-edge",
    "Deployment aether-system/aether-registrar",
    "DaemonSet aether-system/aether-agent",
    "DaemonSet aether-system/aether-mesh-dns",
    "GatewayClass aether",
    "MutatingWebhookConfiguration aether-pod-mutation",
    "ValidatingWebhookConfiguration aether-validation",
}
"""What every overlay installs."""


def test_the_overlay_list_is_complete() -> None:
    """Every directory of manifests/overlays is rendered by these tests."""
    assert sorted(path.name for path in (MANIFESTS / "overlays").iterdir()) == sorted(OVERLAYS)


def test_every_overlay_renders_every_role(rendered: dict[str, list[Object]]) -> None:
    """Each overlay holds every role's objects once, and the default one its registrar's volume claim."""
    for name, objects in rendered.items():
        names = [name_of(obj) for obj in objects]
        assert len(names) == len(set(names)), name
        extra = {"PersistentVolumeClaim aether-system/aether-registrar-data"} if name == "default" else set()
        assert set(names) == EXPECTED | extra, name


def test_the_default_registrar_is_one_replica_on_its_volume(rendered: dict[str, list[Object]]) -> None:
    """Embedded store: one replica, recreated (never two writers), its data directory on the claim."""
    registrar = next(
        obj for obj in rendered["default"] if name_of(obj) == "Deployment aether-system/aether-registrar"
    )
    spec = registrar["spec"]
    assert (spec["replicas"], spec["strategy"]["type"]) == (1, "Recreate")
    assert spec["template"]["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "aether-registrar-data"}}
    ]


def test_the_etcd_registrars_are_replicas_on_the_named_etcd(rendered: dict[str, list[Object]]) -> None:
    """etcd: two replicas, no volume, the endpoints of etcd.env on their command line; the endpoints' ConfigMap
    is not applied."""
    registrar = next(
        obj for obj in rendered["etcd"] if name_of(obj) == "Deployment aether-system/aether-registrar"
    )
    spec = registrar["spec"]
    container = spec["template"]["spec"]["containers"][0]
    example = (MANIFESTS / "overlays" / "etcd" / "etcd.env.example").read_text()
    endpoints = next(line for line in example.splitlines() if line.startswith("ETCD_ENDPOINTS=")).partition(
        "="
    )[2]
    assert spec["replicas"] == 2
    assert spec["template"]["spec"].get("volumes", []) == []
    assert "volumeMounts" not in container or container["volumeMounts"] == []
    assert container["command"][2:5] == ["--backend=etcd", f"--etcd-endpoints={endpoints}", "--listen=:18090"]


def test_the_etcd_overlay_without_etcd_env_names_the_file(tmp_path: Path) -> None:
    """No etcd.env: kustomize fails and names the file to write."""
    copied = prepared_manifests(tmp_path)
    (copied / "overlays" / "etcd" / "etcd.env").unlink()
    done = kustomize(copied / "overlays" / "etcd")
    assert done.returncode != 0
    assert f"{copied / 'overlays' / 'etcd' / 'etcd.env'}: no such file or directory" in done.stderr


def test_the_etcd_overlay_without_endpoints_names_the_field(tmp_path: Path) -> None:
    """An etcd.env without ETCD_ENDPOINTS: kustomize fails naming the missing field."""
    copied = prepared_manifests(tmp_path)
    (copied / "overlays" / "etcd" / "etcd.env").write_text("ETCD=http://10.0.0.1:2379\n")
    done = kustomize(copied / "overlays" / "etcd")
    assert done.returncode != 0
    assert "fieldPath `data.ETCD_ENDPOINTS` is missing for replacement source" in done.stderr
