"""The agent's CNI service over its Unix socket: decisions, the wait for the proxy's ACK, and idempotent removal."""

from __future__ import annotations

import functools
from pathlib import Path

import attrs
import pytest
import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.cni import call_agent
from aether.cni.errors import AgentUnavailable
from aether.cni.server import PodMetadata, PodNotKnown
from aether.core.events.pods import NodeCaptureConfigured, Pod
from aether.core.project.names import capture_listener_name
from aether.core.snapshot import LISTENER_TYPE
from aether.core.state import State
from aether.plane.replay import decoded_records
from aether.proto.cni.v1 import cni_pb2
from aether.testing.builders import resource_acked, resource_nacked
from tests.cni.conftest import ANNOTATIONS, MANAGED, NODE_NAME, POD_IP, agent_config, dict_lookup

ACK_WAIT = 30.0
"""Longer than any test: every answer below comes from an ACK, a NACK or a decision, never from the wait running out."""


@attrs.frozen(kw_only=True)
class Served:
    agent: RunningAgent
    socket: Path
    pods: dict[tuple[str, str], PodMetadata]


LISTENED = Pod(namespace="default", name="web-1", netns="/run/netns/test-pod")
"""The pod `_cni_pod()` becomes, as far as its listener names go."""


@pytest.fixture
async def served(nursery: trio.Nursery, short_dir: Path) -> Served:
    pods: dict[tuple[str, str], PodMetadata] = {}
    config = agent_config(short_dir, lookup=dict_lookup(pods), ack_wait=ACK_WAIT)
    running: RunningAgent = await nursery.start(serve_agent, config)
    return Served(agent=running, socket=short_dir / "cni.sock", pods=pods)


def _cni_pod(
    name: str = "web-1", *, container: str = "c1", ips: tuple[str, ...] = (POD_IP,)
) -> cni_pb2.CNIPod:
    return cni_pb2.CNIPod(
        name=name,
        namespace="default",
        uid=f"uid-{name}",
        network_namespace="/run/netns/test-pod",
        container_id=container,
        ips=list(ips),
        interface_name="eth0",
    )


async def _add(socket: Path, pod: cni_pb2.CNIPod) -> cni_pb2.AddPodResponse:
    with trio.fail_after(10):
        return await call_agent(socket, "AddPod", cni_pb2.AddPodRequest(pod=pod), cni_pb2.AddPodResponse)


async def _answer_when_listeners_appear(agent: RunningAgent, pod: Pod, *, ack: bool) -> None:
    """Play the node's Envoy: once the snapshot holds the pod's capture listener, ACK (or NACK) its LDS version."""
    snapshot = agent.cache.get(NODE_NAME)
    while snapshot is None or capture_listener_name(pod) not in snapshot.of_type(LISTENER_TYPE):
        snapshot = await agent.cache.wait_newer(NODE_NAME, seen=snapshot)
    version = snapshot.version(LISTENER_TYPE)
    event = (
        resource_acked(NODE_NAME, type_url=LISTENER_TYPE, version=version)
        if ack
        else resource_nacked(
            NODE_NAME, type_url=LISTENER_TYPE, version=version, error_message="bind: no such netns"
        )
    )
    async with agent.journal.sender() as send:
        await send.send(event)


async def test_add_pod_answers_once_the_proxy_acked_the_pods_listeners(served: Served) -> None:
    """AddPod appends the pod, waits for the LDS ACK of a version holding its listeners, and sends its capture."""
    agent, socket, pods = served.agent, served.socket, served.pods
    pods[("default", "web-1")] = PodMetadata(service_account="web", labels=MANAGED, annotations=ANNOTATIONS)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(_answer_when_listeners_appear, agent, LISTENED, ack=True))
        response = await _add(socket, _cni_pod())
    assert response == cni_pb2.AddPodResponse(
        result=cni_pb2.RESULT_SUCCESS,
        capture=cni_pb2.CaptureSettings(
            exclude_outbound_ports=[9090], exclude_outbound_ip_ranges=["10.88.0.3/32"]
        ),
        listeners_acked=True,
    )


async def test_add_pod_reports_the_proxys_nack(served: Served) -> None:
    """A NACK of the version holding the pod's listeners is an error answer carrying Envoy's message."""
    agent, socket, pods = served.agent, served.socket, served.pods
    pods[("default", "web-1")] = PodMetadata(labels=MANAGED)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(_answer_when_listeners_appear, agent, LISTENED, ack=False))
        response = await _add(socket, _cni_pod())
    assert response == cni_pb2.AddPodResponse(
        result=cni_pb2.RESULT_ERROR,
        message="pod 'default/web-1': the node's proxy rejected its listeners: bind: no such netns",
    )


async def test_add_pod_ignores_unmanaged_pods_and_refuses_pods_it_cannot_mesh(served: Served) -> None:
    """Unlabelled and never-meshed pods are IGNORED; a managed pod without IPs or container is an ERROR."""
    agent, socket, pods = served.agent, served.socket, served.pods
    pods[("default", "web-1")] = PodMetadata(labels=MANAGED)
    pods[("kube-system", "dns-1")] = PodMetadata(labels=MANAGED)
    seq = agent.journal.state.seq
    plain = await _add(socket, _cni_pod("other"))
    system = await _add(
        socket, cni_pb2.CNIPod(name="dns-1", namespace="kube-system", container_id="c9", ips=[POD_IP])
    )
    addressless = await _add(socket, _cni_pod(ips=()))
    containerless = await _add(socket, cni_pb2.CNIPod(name="web-1", namespace="default"))
    assert [(item.result, item.message) for item in (plain, system, addressless, containerless)] == [
        (
            cni_pb2.RESULT_IGNORED,
            "pod 'default/other': label 'aether.io/managed' must be 'true' to join the mesh (got None)",
        ),
        (cni_pb2.RESULT_IGNORED, "pod 'kube-system/dns-1': namespace 'kube-system' is never meshed"),
        (
            cni_pb2.RESULT_ERROR,
            "pod 'default/web-1': has no IP address yet; it joins the mesh once one is assigned",
        ),
        (
            cni_pb2.RESULT_ERROR,
            "the pod must have a namespace, a name and a container id (got 'default', 'web-1', '')",
        ),
    ]
    assert agent.journal.state.seq == seq


async def test_remove_and_check_follow_the_sandbox_container(served: Served) -> None:
    """CHECK and DEL of an older sandbox neither match nor remove the pod's current one."""
    agent, socket, pods = served.agent, served.socket, served.pods
    pods[("default", "web-1")] = PodMetadata(labels=MANAGED)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(_answer_when_listeners_appear, agent, LISTENED, ack=True))
        assert (await _add(socket, _cni_pod(container="new"))).result == cni_pb2.RESULT_SUCCESS

    async def check(container: str) -> cni_pb2.CheckPodResponse:
        request = cni_pb2.CheckPodRequest(pod=_cni_pod(container=container))
        return await call_agent(socket, "CheckPod", request, cni_pb2.CheckPodResponse)

    async def remove(container: str) -> cni_pb2.RemovePodResponse:
        request = cni_pb2.RemovePodRequest(name="web-1", namespace="default", container_id=container)
        return await call_agent(socket, "RemovePod", request, cni_pb2.RemovePodResponse)

    assert await check("old") == cni_pb2.CheckPodResponse(
        result=cni_pb2.RESULT_ERROR,
        message="pod 'default/web-1': not registered for container 'old' (the agent has container 'new')",
    )
    assert await check("new") == cni_pb2.CheckPodResponse(
        result=cni_pb2.RESULT_SUCCESS, capture=cni_pb2.CaptureSettings()
    )
    assert await remove("old") == cni_pb2.RemovePodResponse(
        result=cni_pb2.RESULT_SUCCESS, message="not registered"
    )
    assert "default/web-1" in agent.journal.state.pods
    assert await remove("new") == cni_pb2.RemovePodResponse(result=cni_pb2.RESULT_SUCCESS)
    assert "default/web-1" not in agent.journal.state.pods
    status = await call_agent(socket, "Status", cni_pb2.StatusRequest(), cni_pb2.StatusResponse)
    assert status == cni_pb2.StatusResponse(seq=agent.journal.state.seq, pods=0)


async def test_a_pod_the_lookup_does_not_know_yet_is_retried(short_dir: Path, nursery: trio.Nursery) -> None:
    """A lookup raising PodNotKnown makes AddPod UNAVAILABLE: the plugin answers code 11, the runtime retries."""

    def lookup(namespace: str, name: str) -> PodMetadata:
        raise PodNotKnown(namespace, name, reason="the pod watch has not listed the node's pods yet")

    await nursery.start(serve_agent, agent_config(short_dir, lookup=lookup, ack_wait=ACK_WAIT))
    socket = short_dir / "cni.sock"
    with pytest.raises(AgentUnavailable) as caught:
        await _add(socket, _cni_pod())
    assert (caught.value.code, caught.value.message, caught.value.details) == (
        11,
        f"agent at '{socket}': AddPod is unavailable; retry",
        "pod 'default/web-1' is not known to the agent yet (the pod watch has not listed the node's pods yet); retry",
    )


async def test_an_agent_with_a_cni_service_records_once_that_its_node_is_captured(short_dir: Path) -> None:
    """The first start with a CNI service appends `NodeCaptureConfigured` before anything else; a restart with the
    same configuration appends nothing; a start without the service withdraws the fact."""
    config = agent_config(short_dir, lookup=dict_lookup({}), ack_wait=0.2)
    starts: tuple[tuple[AgentConfig, frozenset[str]], ...] = (
        (config, frozenset({NODE_NAME})),
        (config, frozenset({NODE_NAME})),
        (attrs.evolve(config, cni_socket=None), frozenset()),
    )
    for start, expected in starts:
        folded = trio.Event()

        def follow(
            state: State, now: int, *, want: frozenset[str] = expected, done: trio.Event = folded
        ) -> None:
            if state.captured_nodes == want:
                done.set()

        async with trio.open_nursery() as nursery:
            running: RunningAgent = await nursery.start(serve_agent, start)
            running.journal.subscribe(follow)
            with trio.fail_after(5):
                await folded.wait()
            nursery.cancel_scope.cancel()
    events = [record.event for record in decoded_records(short_dir / "log")]
    assert [
        (event.node_name, event.captured) for event in events if isinstance(event, NodeCaptureConfigured)
    ] == [
        (NODE_NAME, True),
        (NODE_NAME, False),
    ]
    assert isinstance(events[0], NodeCaptureConfigured)
