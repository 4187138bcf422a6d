"""`aether demo --netns` plumbing with real namespaces (root): the address check and the stand-in kubelet's cleanup."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from aether.demo.kubelet import DemoPod, Kubelet
from aether.demo.mesh import DemoError, check_networks
from aether.demo.netns import PodNetwork, address_holders, pod_ip
from aether.identity.mint import TestCA
from aether.kube.manifests import ManifestDirectory
from tests.needs import ROOT, needs

pytestmark = needs(ROOT, "nft", "ip")

INDEX = 97
"""The test pod's /30 (10.210.97.0/30): no bundled pod's, so a demo running meanwhile is not disturbed."""
POD = """\
apiVersion: v1
kind: Pod
metadata: {name: probe-1, namespace: shop, uid: uid-1, labels: {aether.io/managed: "true"}}
spec: {nodeName: demo, serviceAccountName: probe}
status: {podIP: 10.210.97.2}
"""


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def leftover() -> Iterator[PodNetwork]:
    """The namespace and host link a killed demo of another directory left for the test pod."""
    network = PodNetwork(pod="probe-1", index=INDEX, run="0a0a01")
    network.create()
    try:
        yield network
    finally:
        network.remove()


def test_a_pod_network_another_link_holds_is_refused_by_name(tmp_path: Path, leftover: PodNetwork) -> None:
    """A foreign link on a pod's /30 would make the pod unreachable (the host routes to the first link): the demo
    refuses to start, naming the pod, the link and how to remove it; the run's own old link does not count."""
    (tmp_path / "probe-1.yaml").write_text(POD)
    reading = ManifestDirectory.read(tmp_path)
    assert leftover.host_link in address_holders(INDEX)
    with pytest.raises(DemoError) as caught:
        check_networks(reading, run="be0001")
    assert str(caught.value) == (
        f"pod probe-1: its network ({pod_ip(INDEX)}/30) is already routed through link {leftover.host_link!r}, so "
        "the pod would be unreachable (another `aether demo --netns` is running, or one was killed before it "
        f"cleaned up): stop that demo, or remove the link (`ip link del {leftover.host_link}`) and its "
        "namespaces (`ip netns list | grep aether-demo-0a0a0`)"
    )
    check_networks(reading, run="0a0a01")  # its own: replaced by the kubelet, not a conflict


async def test_a_pod_whose_cni_add_fails_leaves_no_namespace(tmp_path: Path) -> None:
    """The kubelet removes the namespace of a pod whose ADD failed (no agent answers): it is not a started pod, so
    stopping the demo would not see it, and it would hold the pod's /30 for every later run."""
    pod = DemoPod(
        name="probe-1", namespace="shop", uid="uid-1", ip=pod_ip(INDEX), service="shop/probe", labels={}
    )
    async with trio.open_nursery() as nursery:
        kubelet = Kubelet(
            nursery,
            ca=TestCA("aether.internal"),
            svids=tmp_path,
            trust_domain="aether.internal",
            netns_run="fa0001",
            cni_socket=tmp_path / "no-agent.sock",
        )
        with pytest.raises(OSError, match=r"^aether-cni ADD for pod probe-1: "):
            await kubelet.sync({"probe-1": pod})
        await kubelet.stop_all()
    assert "aether-demo-fa0001-" not in _namespaces()
    assert address_holders(INDEX) == ()
