"""ADD, DEL, CHECK, GC and STATUS against real network namespaces: what a pod's traffic does once captured."""

from __future__ import annotations

import socket

import pytest
import trio

from aether.cni import CAPTURE_TABLE, NFT_TABLE, write_udp_services
from aether.cni.server import PodMetadata
from aether.core.events.codec import decode_event
from aether.core.events.pods import Pod, PodAdded, PodRemoved
from aether.log.reader import scan_log
from tests.cni.conftest import (
    ANNOTATIONS,
    MANAGED,
    NODE_IP,
    NODE_IP_2,
    POD_IP,
    VIP,
    Agent,
    NetnsPair,
    PluginRun,
    answer,
    capture_routing,
    environment,
    managed,
    needs_netns,
    network_config,
    prev_result,
    ruleset,
    run_cni,
    run_cni_process,
    socket_in,
    udp_exchange,
    udp_server,
)

pytestmark = needs_netns

IP_TRANSPARENT = 19


async def _transparent_listener(pair: NetnsPair) -> trio.socket.SocketType:
    listener = socket_in(pair.pod_path)
    listener.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    await listener.bind(("0.0.0.0", 18001))
    listener.listen()
    return listener


async def _node_listener(pair: NetnsPair, port: int) -> trio.socket.SocketType:
    listener = socket_in(pair.node_path)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    await listener.bind(("0.0.0.0", port))
    listener.listen()
    return listener


async def _reaches(
    client: trio.socket.SocketType, destination: tuple[str, int], listener: trio.socket.SocketType
) -> tuple[str, int]:
    """Connect `client` to `destination`; return the local address of the connection `listener` accepted."""
    with trio.fail_after(5):
        await client.connect(destination)
        accepted, _peer = await listener.accept()
    with accepted, client:
        local: tuple[str, int] = accepted.getsockname()
        return local


async def test_add_captures_tcp_to_18001_with_the_original_destination(
    agent: Agent, netns_pair: NetnsPair
) -> None:
    """After the real `aether-cni` ADD, a pod's dial to a ClusterIP lands on 18001 with its destination intact."""
    managed(agent)
    run = await run_cni_process(environment("ADD", netns=netns_pair.pod_path), network_config(agent.socket))
    assert run.status == 0
    assert run.output == prev_result()
    record = agent.running.journal.state.pods["default/web-1"]
    assert record.pod == Pod(
        namespace="default",
        name="web-1",
        uid="uid-web-1",
        node_name="node-a",
        service_account="web",
        labels=MANAGED,
        annotations=ANNOTATIONS,
        ips=(POD_IP,),
        netns=str(netns_pair.pod_path),
        container_id="c0ffee",
    )
    listener = await _transparent_listener(netns_pair)
    with listener:
        assert await _reaches(socket_in(netns_pair.pod_path), ("10.96.7.7", 8080), listener) == (
            "10.96.7.7",
            8080,
        )


async def test_udp_is_captured_only_to_the_served_destinations_and_answered_from_them(
    agent: Agent, netns_pair: NetnsPair
) -> None:
    """A datagram to a destination of the pod's `udp_services` set reaches the transparent socket bound to that
    very destination, whose answer comes back to the client's connected socket; the same ClusterIP on another
    port, and any other address, pass uncaptured to the real servers (no Envoy here, so the agent adds nothing)."""
    managed(agent)
    assert (
        await run_cni(environment("ADD", netns=netns_pair.pod_path), network_config(agent.socket))
    ).status == 0
    netns_pair.exec(netns_pair.node, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
    pod, node = netns_pair.pod_path, netns_pair.node_path
    proxy = await udp_server(pod, (VIP, 5300), transparent=True)
    real = await udp_server(node, (VIP, 5300))
    other_port = await udp_server(node, (VIP, 9999))
    other_host = await udp_server(node, (NODE_IP_2, 7070))
    with proxy, real, other_port, other_host:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, real, b"real")
            assert await udp_exchange(pod, (VIP, 5300)) == b"real:ping"  # the set is empty: not captured
            write_udp_services(pod, [(VIP, 5300)])
            nursery.start_soon(answer, proxy, b"proxy")
            nursery.start_soon(answer, other_port, b"other-port")
            nursery.start_soon(answer, other_host, b"other-host")
            assert await udp_exchange(pod, (VIP, 5300)) == b"proxy:ping"
            assert await udp_exchange(pod, (VIP, 9999)) == b"other-port:ping"
            assert await udp_exchange(pod, (NODE_IP_2, 7070)) == b"other-host:ping"
            # A second ADD (idempotent) keeps the agent's destinations, and CHECK does not mind them.
            config = network_config(agent.socket)
            assert (await run_cni(environment("ADD", netns=pod), config)).status == 0
            assert await run_cni(environment("CHECK", netns=pod), config) == PluginRun(status=0, output=None)
            nursery.start_soon(answer, proxy, b"proxy")
            assert await udp_exchange(pod, (VIP, 5300)) == b"proxy:ping"
            # Gone from the set: the next datagram goes where it was sent again.
            write_udp_services(pod, [])
            nursery.start_soon(answer, real, b"real")
            assert await udp_exchange(pod, (VIP, 5300)) == b"real:ping"


async def test_excluded_ports_ranges_loopback_and_proxy_traffic_pass_straight_through(
    agent: Agent, netns_pair: NetnsPair
) -> None:
    """Excluded ports and ranges, loopback, and sockets with the proxy's mark reach their real destination."""
    managed(agent)
    assert (
        await run_cni(environment("ADD", netns=netns_pair.pod_path), network_config(agent.socket))
    ).status == 0
    capture = await _transparent_listener(netns_pair)
    excluded_port = await _node_listener(netns_pair, 9090)
    other_port = await _node_listener(netns_pair, 7070)
    local = socket_in(netns_pair.pod_path)
    await local.bind(("127.0.0.1", 5000))
    local.listen()
    with capture, excluded_port, other_port, local:
        pod = netns_pair.pod_path
        assert await _reaches(socket_in(pod), (NODE_IP, 9090), excluded_port) == (NODE_IP, 9090)
        assert await _reaches(socket_in(pod), (NODE_IP_2, 7070), other_port) == (NODE_IP_2, 7070)
        assert await _reaches(socket_in(pod), ("127.0.0.1", 5000), local) == ("127.0.0.1", 5000)
        proxy = socket_in(pod)
        proxy.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, 0xAE7E)
        assert await _reaches(proxy, (NODE_IP, 7070), other_port) == (NODE_IP, 7070)
        # The same destination without the mark is captured: the exclusions above were the rules at work.
        assert await _reaches(socket_in(pod), (NODE_IP, 7070), capture) == (NODE_IP, 7070)


async def test_add_is_idempotent_and_check_sees_the_rules_and_the_registration(
    agent: Agent, netns_pair: NetnsPair
) -> None:
    """A second ADD changes nothing (no new event, same ruleset); CHECK passes, and fails once a rule is gone."""
    managed(agent)
    env = environment("ADD", netns=netns_pair.pod_path)
    config = network_config(agent.socket, meshDNS=NODE_IP)
    assert (await run_cni(env, config)).status == 0
    seq, rules = agent.running.journal.state.seq, ruleset(netns_pair)
    assert (await run_cni(env, config)).status == 0
    assert (agent.running.journal.state.seq, ruleset(netns_pair)) == (seq, rules)
    check = environment("CHECK", netns=netns_pair.pod_path)
    assert await run_cni(check, config) == PluginRun(status=0, output=None)
    netns_pair.exec(netns_pair.pod, "nft", "delete", "chain", "ip", NFT_TABLE, "dns")
    failed = await run_cni(check, config)
    assert failed.status == 1
    assert failed.output is not None
    assert (failed.output["code"], failed.output["msg"]) == (
        1003,
        f"pod 'default/web-1': the capture in '{netns_pair.pod_path}' is not as programmed",
    )
    assert "chains" in failed.output["details"]


async def test_del_leaves_no_rule_behind_and_removes_the_pod(agent: Agent, netns_pair: NetnsPair) -> None:
    """DEL removes the nft table, the policy rule, the local route and the registration; a second DEL is fine."""
    managed(agent)
    config = network_config(agent.socket, meshDNS=NODE_IP)
    before = ruleset(netns_pair), capture_routing(netns_pair)
    assert (await run_cni(environment("ADD", netns=netns_pair.pod_path), config)).status == 0
    assert NFT_TABLE in ruleset(netns_pair)
    assert f"lookup {CAPTURE_TABLE}" in capture_routing(netns_pair)[0]
    for _ in range(2):
        run = await run_cni_process(environment("DEL", netns=netns_pair.pod_path), config)
        assert (run.status, run.output) == (0, None)
    assert (ruleset(netns_pair), capture_routing(netns_pair)) == before
    assert "default/web-1" not in agent.running.journal.state.pods


async def test_unmanaged_pod_is_passed_through_without_capture(agent: Agent, netns_pair: NetnsPair) -> None:
    """A pod without the managed label gets the previous result back, no rules, and no log entry."""
    agent.pods[("default", "web-1")] = PodMetadata(labels={"app": "web"})
    seq = agent.running.journal.state.seq
    run = await run_cni(environment("ADD", netns=netns_pair.pod_path), network_config(agent.socket))
    assert (run.status, run.output) == (0, prev_result())
    assert NFT_TABLE not in ruleset(netns_pair)
    assert agent.running.journal.state.seq == seq


async def test_agent_down_fails_add_with_try_again_later_and_programs_nothing(
    netns_pair: NetnsPair,
) -> None:
    """No agent on the socket: ADD answers code 11 (retry) and the namespace has no rule at all."""
    missing = netns_pair.pod_path.parent / "no-such-agent.sock"
    run = await run_cni_process(environment("ADD", netns=netns_pair.pod_path), network_config(missing))
    assert run.status == 1
    assert run.output is not None
    assert (run.output["code"], run.output["msg"]) == (
        11,
        f"agent at '{missing}': AddPod: the agent is not reachable; is the aether agent running on this node?",
    )
    assert ruleset(netns_pair) == ""
    assert f"lookup {CAPTURE_TABLE}" not in capture_routing(netns_pair)[0]


async def test_gc_removes_pods_of_vanished_containers_and_status_reports_the_agent(
    agent: Agent, netns_pair: NetnsPair
) -> None:
    """GC keeps the pods of valid attachments and removes the others; STATUS is 0 with an agent, 50 without."""
    managed(agent, "web-1")
    managed(agent, "web-2")
    config = network_config(agent.socket)
    for name, container in (("web-1", "c1"), ("web-2", "c2")):
        env = environment("ADD", netns=netns_pair.pod_path, pod=name, container=container)
        assert (await run_cni(env, config)).status == 0
    gc = {**config, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]}
    assert await run_cni({"CNI_COMMAND": "GC"}, gc) == PluginRun(status=0, output=None)
    assert await run_cni({"CNI_COMMAND": "STATUS"}, config) == PluginRun(status=0, output=None)
    assert sorted(agent.running.journal.state.pods.keys()) == ["default/web-1"]
    down = await run_cni({"CNI_COMMAND": "STATUS"}, network_config(agent.socket.with_name("gone.sock")))
    assert down.status == 1
    assert down.output is not None
    assert down.output["code"] == 50


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
async def test_a_netns_that_does_not_exist_is_an_invalid_environment(agent: Agent, command: str) -> None:
    """ADD and CHECK with a CNI_NETNS path that does not exist answer code 4, naming the path."""
    managed(agent)
    run = await run_cni(
        environment(command, netns=agent.socket.with_name("no-netns")), network_config(agent.socket)
    )
    assert run.status == 1
    assert run.output == {
        "cniVersion": "1.1.0",
        "code": 4,
        "msg": f"CNI_NETNS '{agent.socket.with_name('no-netns')}': no such network namespace",
    }


async def test_a_netns_path_that_is_no_namespace_fails_add_and_takes_the_registration_back(
    agent: Agent,
) -> None:
    """CNI_NETNS naming a plain file: code 4 after the agent said yes, and the pod's registration is undone."""
    managed(agent)
    plain = agent.socket.with_name("not-a-netns")
    await trio.Path(plain).write_text("")
    seq = agent.running.journal.state.seq
    run = await run_cni(environment("ADD", netns=plain), network_config(agent.socket))
    assert run.status == 1
    assert run.output is not None
    assert (run.output["code"], run.output["msg"]) == (4, f"CNI_NETNS '{plain}': not a network namespace")
    state = agent.running.journal.state
    # Of the events after `seq` (the agent may append others of its own meanwhile), this pod's are PodAdded, then
    # PodRemoved.
    log_dir = agent.socket.parent / "log"
    kinds = [
        type(event).__name__
        for record in scan_log(log_dir, from_seq=seq + 1, to_seq=state.seq)
        if isinstance(event := decode_event(record.payload), PodAdded | PodRemoved)
    ]
    assert ("default/web-1" in state.pods, kinds) == (False, ["PodAdded", "PodRemoved"])


async def _exchange(sender: trio.socket.SocketType, receiver: trio.socket.SocketType, data: bytes) -> bytes:
    """Send `data` from `sender`; return what `receiver` reads (raises ConnectionResetError on a reset)."""
    with trio.fail_after(5):
        await sender.send(data)
        return await receiver.recv(64)


async def test_connections_made_before_add_survive_the_capture(agent: Agent, netns_pair: NetnsPair) -> None:
    """A connection made to the pod before ADD keeps its packets (they are no capture), and so does one the pod made.

    The agent advertises a pod's endpoint before the plugin programs the capture (ADD registers first), so callers
    connect to the pod's inbound before the ruleset exists. Conntrack starts in the namespace with the ruleset and
    picks those connections up mid-stream, taking the first packet it sees for the connection's original direction:
    a reply of the pod's inbound, taken for a new outbound connection, was diverted to the capture listener, which
    answered with a reset (the demo lost requests in flight on the caller's connection to a returning replica).
    """
    managed(agent)
    inbound = socket_in(netns_pair.pod_path)
    inbound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    await inbound.bind((POD_IP, 18008))
    inbound.listen()
    upstream = await _node_listener(netns_pair, 7070)
    capture = await _transparent_listener(netns_pair)
    caller, outbound = socket_in(netns_pair.node_path), socket_in(netns_pair.pod_path)
    with inbound, upstream, capture, caller, outbound:
        with trio.fail_after(5):
            await caller.connect((POD_IP, 18008))
            served, _ = await inbound.accept()
            await outbound.connect((NODE_IP, 7070))
            answering, _ = await upstream.accept()
        with served, answering:
            assert await _exchange(caller, served, b"before") == b"before"
            assert await _exchange(outbound, answering, b"before") == b"before"
            run = await run_cni(environment("ADD", netns=netns_pair.pod_path), network_config(agent.socket))
            assert run.status == 0
            # The pod's side speaks first: the packets conntrack meets first are the pod's own.
            assert await _exchange(served, caller, b"reply") == b"reply"
            assert await _exchange(caller, served, b"after") == b"after"
            assert await _exchange(outbound, answering, b"after") == b"after"
            assert await _exchange(answering, outbound, b"reply") == b"reply"
        # A connection made after ADD is captured as before.
        assert await _reaches(socket_in(netns_pair.pod_path), (NODE_IP, 7070), capture) == (NODE_IP, 7070)
