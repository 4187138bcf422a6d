"""Tests of the SPIFFE clients (`aether.identity.workload_api`, `aether.identity.broker`) against the faithful fake
servers of `aether.testing.spiffe`, over real Unix sockets (mTLS for the broker), their events folded by the real
journal. Waits are on the journal's state or the fakes' counters, bounded in real time; none is on time itself.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import ec

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.cli import identity_ready_command
from aether.core.events import PodAdded, PodRemoved
from aether.core.state import RejectionReason, State
from aether.identity.broker import BrokerClient, process_in_netns
from aether.identity.mint import MintedSvid, TestCA
from aether.identity.status import IDENTITY_DOCUMENT, identity_document
from aether.identity.workload_api import WorkloadIdentity, endpoint_socket_from_env, serve_workload_api
from aether.plane.journal import Journal, open_journal
from aether.registrar import serve_registrar
from aether.registrar.authorization import agent_spiffe_id
from aether.rpc.backoff import Backoff
from aether.rpc.listen import ListenAddress
from aether.rpc.tls import server_tls_context
from aether.sync import LatestValue
from aether.testing import make_pod, pod_added
from aether.testing.envoy import wait_for
from aether.testing.memory_backend import MemoryBackend
from aether.testing.spiffe import FakeBroker, FakeWorkloadApi

TD = "aether.internal"
AGENT_ID = f"spiffe://{TD}/spire/agent/k8s_psat/node-a"
WEB_ID = f"spiffe://{TD}/ns/default/sa/web"
SECONDS = 10
"""Bound on every wait (each takes milliseconds)."""
FAST = Backoff(base=0.01, cap=0.05)
HOUR = 3600 * 10**9


async def until(journal: Journal, predicate: Callable[[State], bool]) -> State:
    """Return the journal's state once `predicate` holds on it (bounded in real time)."""
    states: LatestValue[State] = LatestValue(journal.state)
    journal.subscribe(lambda state, _: states.set(state))
    with trio.fail_after(SECONDS):
        return await states.wait_value(predicate)


async def counted(read: Callable[[], int], at_least: int) -> None:
    """Wait until the counter `read()` reaches `at_least` (a client's statistics: polled, bounded in real time)."""

    async def reached() -> bool:
        return read() >= at_least

    await wait_for(reached, timeout=SECONDS, interval=0.005)


@attrs.define
class Rig:
    journal: Journal
    ca: TestCA
    workload: FakeWorkloadApi
    broker: FakeBroker
    identity: WorkloadIdentity
    client: BrokerClient
    workload_socket: Path
    broker_socket: Path
    nursery: trio.Nursery

    async def add_pod(self, name: str = "web-1", **fields: object) -> None:
        async with self.journal.sender() as send:
            await send.send(PodAdded(observed_at=time.time_ns(), source="test", pod=make_pod(name, **fields)))  # type: ignore[arg-type]

    async def remove_pod(self, name: str = "web-1") -> None:
        async with self.journal.sender() as send:
            await send.send(
                PodRemoved(observed_at=time.time_ns(), source="test", namespace="default", name=name)
            )


@asynccontextmanager
async def rig(
    tmp_path: Path,
    *,
    references: frozenset[str] = frozenset({"kubernetes", "pid"}),
    broker_up: bool = True,
    ca: TestCA | None = None,
    workload: FakeWorkloadApi | None = None,
) -> AsyncIterator[Rig]:
    """The fakes (a broker of `ca`, default a new one; `workload` default: the agent's SVID of `ca`), a journal,
    the Workload API client and the broker client, running."""
    ca = TestCA(TD) if ca is None else ca
    workload = FakeWorkloadApi(ca, svids=[ca.issue(AGENT_ID)]) if workload is None else workload
    broker = FakeBroker(ca, directory=tmp_path / "broker", references=references)
    workload_socket, broker_socket = tmp_path / "workload.sock", tmp_path / "broker.sock"
    async with open_journal(tmp_path / "log") as journal, trio.open_nursery() as nursery:
        await nursery.start(workload.serve, workload_socket)
        if broker_up:
            await nursery.start(broker.serve, broker_socket)
        identity = await nursery.start(
            functools.partial(
                serve_workload_api, workload_socket, send=journal.sender(), backoff=FAST, rng=random.Random(1)
            )
        )
        client = BrokerClient(
            socket=broker_socket, identity=identity, send=journal.sender(), backoff=FAST, rng=random.Random(2)
        )
        journal.subscribe(client.follow)
        nursery.start_soon(client.serve)
        yield Rig(journal, ca, workload, broker, identity, client, workload_socket, broker_socket, nursery)
        nursery.cancel_scope.cancel()


async def test_the_workload_api_streams_the_agents_identity_and_the_bundles(tmp_path: Path) -> None:
    other = TestCA("partner.example")
    async with rig(tmp_path) as r:
        with trio.fail_after(SECONDS):
            await r.identity.wait_ready()
        assert r.identity.trust_domain == TD
        material = r.identity.tls_material()
        assert material is not None
        assert material.spiffe_id == AGENT_ID
        state = await until(r.journal, lambda s: TD in s.identity.trust_bundles)
        assert state.identity.trust_bundles[TD].bundle_pem == r.ca.bundle_pem
        assert not state.identity.svids, "the agent's own SVID is not a pod's: it stays out of the journal"
        r.workload.set_bundles(
            {f"spiffe://{TD}": r.ca.bundle_pem, "spiffe://partner.example": other.bundle_pem}
        )
        state = await until(r.journal, lambda s: "partner.example" in s.identity.trust_bundles)
        r.workload.set_bundles({f"spiffe://{TD}": r.ca.bundle_pem})
        await until(r.journal, lambda s: "partner.example" not in s.identity.trust_bundles)
        assert r.workload.calls == {"FetchX509SVID": 1, "FetchX509Bundles": 1}


def test_the_endpoint_socket_comes_from_the_environment() -> None:
    assert endpoint_socket_from_env({"SPIFFE_ENDPOINT_SOCKET": "unix:///run/spire/agent.sock"}) == Path(
        "/run/spire/agent.sock"
    )
    assert endpoint_socket_from_env({}) is None


async def test_a_pods_svid_is_brokered_by_kubernetes_reference_rotated_and_dropped_when_it_leaves(
    tmp_path: Path,
) -> None:
    async with rig(tmp_path) as r:
        first = r.ca.issue(WEB_ID)
        r.broker.set_svids("default/web-1", [first])
        await r.add_pod("web-1", uid="u-1")
        state = await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        assert state.identity.svids[WEB_ID].cert_chain_pem == first.cert_chain_pem
        assert r.broker.calls == [("kubernetes", "default/web-1")]
        assert r.broker.callers == [AGENT_ID], "mTLS with the agent's own SVID"
        second = r.ca.issue(WEB_ID)
        r.broker.set_svids("default/web-1", [second])
        await until(r.journal, lambda s: s.identity.svids[WEB_ID].cert_chain_pem == second.cert_chain_pem)
        await r.remove_pod("web-1")
        await until(r.journal, lambda s: WEB_ID not in s.identity.svids)
        assert r.client.statistics().pods == 0
        # The client reset the stream: the server's next answer on it fails, and the stream is gone.
        r.broker.set_svids("default/web-1", [r.ca.issue(WEB_ID)])
        with trio.fail_after(SECONDS):
            await r.broker.open_streams.wait_value(lambda n: n == 0)
        assert WEB_ID not in r.journal.state.identity.svids


async def test_the_brokers_per_pod_bundles_are_judged_by_the_nodes_and_their_disagreement_reported(
    tmp_path: Path,
) -> None:
    """The broker sends web-1's SVID with a bundle holding a second root the node's bundle lacks, and a federated
    bundle: the SVID (of the node's root) is served, the disagreement and the federation are reported per pod
    (`/identity`), an SVID of the second root is refused (peers would refuse it: the node's bundle is what they
    verify with), and once the node's Workload API has both bundles the disagreement is gone and that SVID is served."""
    second_root = TestCA(TD, key=ec.generate_private_key(ec.SECP256R1()))
    partner = TestCA("partner.example")
    async with rig(tmp_path) as r:
        pod_bundles = {
            "bundle_pem": r.ca.bundle_pem + second_root.bundle_pem,
            "federated": {"spiffe://partner.example": partner.bundle_pem},
        }
        first = r.ca.issue(WEB_ID)
        r.broker.set_svids("default/web-1", [first], **pod_bundles)  # type: ignore[arg-type]
        await r.add_pod("web-1")
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        (web,) = r.client.pods()
        assert web.federated == ("partner.example",)
        assert "holds 1 CA(s) the node's (Workload API) bundle lacks" in web.bundle_disagreement
        assert "federates with ['partner.example'], whose bundles the node does not hold" in (
            web.bundle_disagreement
        )
        document = identity_document(r.journal.state, now=time.time_ns(), broker=r.client.pods())
        assert document["pods"][0]["broker"]["bundleDisagreement"] == web.bundle_disagreement
        r.broker.set_svids("default/web-1", [second_root.issue(WEB_ID)], **pod_bundles)  # type: ignore[arg-type]
        state = await until(r.journal, lambda s: f"svid/{WEB_ID}" in s.diagnostics.rejections)
        assert (
            "does not lead to a CA of the trust bundle"
            in state.diagnostics.rejections[f"svid/{WEB_ID}"].message
        )
        assert state.identity.svids[WEB_ID].cert_chain_pem == first.cert_chain_pem
        r.workload.set_bundles(
            {
                f"spiffe://{TD}": r.ca.bundle_pem + second_root.bundle_pem,
                "spiffe://partner.example": partner.bundle_pem,
            }
        )

        async def agreed() -> bool:
            return r.client.pods()[0].bundle_disagreement == ""

        await wait_for(agreed, timeout=SECONDS)
        # The SVID refused for want of its CA is judged again with the node's new bundle, and served.
        await until(r.journal, lambda s: s.identity.svids[WEB_ID].cert_chain_pem != first.cert_chain_pem)


async def test_the_broker_connection_is_redialled_when_the_bundle_drops_the_brokers_ca(
    tmp_path: Path,
) -> None:
    """The broker's certificate is of a root the node's bundle then drops: the open connection (verified with that
    root) is redialled at once with the new bundle, and fails its handshake; the SVID sent stays served."""
    old_root, new_root = TestCA(TD), TestCA(TD, key=ec.generate_private_key(ec.SECP256R1()))
    workload = FakeWorkloadApi(new_root, svids=[old_root.issue(AGENT_ID)])
    workload.set_bundles({f"spiffe://{TD}": new_root.bundle_pem + old_root.bundle_pem})
    async with rig(tmp_path, ca=old_root, workload=workload) as r:
        r.broker.set_svids("default/web-1", [old_root.issue(WEB_ID)])
        await r.add_pod("web-1")
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        failures, connects = r.client.statistics().failures, r.client.statistics().connects
        workload.set_bundles({f"spiffe://{TD}": new_root.bundle_pem})
        await counted(lambda: r.client.statistics().failures, failures + 1)
        assert r.client.statistics().connects == connects, "no connection trusts the dropped root any more"
        assert "CERTIFICATE_VERIFY_FAILED" in r.client.statistics().last_error
        assert WEB_ID in r.journal.state.identity.svids


async def test_a_server_without_kubernetes_references_is_asked_by_pid(tmp_path: Path) -> None:
    async with rig(tmp_path, references=frozenset({"pid"})) as r:
        r.broker.set_svids("default/web-1", [r.ca.issue(WEB_ID)])
        # This test's own process stands for the pod's: the netns of the test is "the pod's network namespace".
        pid = process_in_netns("/proc/self/ns/net")
        assert pid is not None
        r.broker.pids[pid] = "default/web-1"
        await r.add_pod("web-1", netns="/proc/self/ns/net")
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        assert r.broker.calls[-1] == ("pid", "default/web-1")
        assert r.client.statistics().wants_pid


async def test_a_revoked_identity_stops_being_served_and_an_unknown_pod_is_retried(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        await r.add_pod("web-1")
        await counted(lambda: r.client.statistics().pod_failures, 2)  # NotFound, retried after a backoff
        r.broker.set_svids("default/web-1", [r.ca.issue(WEB_ID)])
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        r.broker.revoke("default/web-1")
        await until(r.journal, lambda s: WEB_ID not in s.identity.svids)


async def test_a_workload_reference_error_is_retried_after_a_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """FailedPrecondition (the pod's reference resolves but cannot be attested yet) ends that pod's stream only:
    it is logged, and asked again after a backoff until the SVID comes, on the same connection."""
    async with rig(tmp_path) as r:
        r.broker.unattestable["default/web-1"] = 2
        r.broker.set_svids("default/web-1", [r.ca.issue(WEB_ID)])
        await r.add_pod("web-1")
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        assert r.broker.calls == [("kubernetes", "default/web-1")] * 3
        statistics = r.client.statistics()
        assert (statistics.pod_failures, statistics.connects, statistics.failures) == (2, 1, 0)
        logged = [record.getMessage() for record in caplog.records if record.name == "aether.identity.broker"]
        assert sum("pod default/web-1: FailedPreconditionError" in line for line in logged) == 2, logged


async def test_bad_svids_are_refused_with_their_reason_and_the_good_one_keeps_serving(tmp_path: Path) -> None:
    other = TestCA("evil.example")
    now = time.time_ns()
    cases: list[tuple[str, Callable[[TestCA], MintedSvid], str]] = [
        ("expired", lambda ca: ca.issue(WEB_ID, not_before=now - 2 * HOUR, not_after=now - HOUR), "expired"),
        (
            "not yet valid",
            lambda ca: ca.issue(WEB_ID, not_before=now + HOUR, not_after=now + 2 * HOUR),
            "not valid yet",
        ),
        (
            "wrong trust domain",
            lambda ca: other.issue("spiffe://evil.example/ns/default/sa/web"),
            "trust domain 'evil.example'",
        ),
        (
            "wrong SPIFFE ID",
            lambda ca: ca.issue(f"spiffe://{TD}/ns/default/sa/admin"),
            "names another identity",
        ),
        ("untrusted CA", lambda ca: TestCA(TD, key=other.new_key()).issue(WEB_ID), "does not lead to a CA"),
    ]
    async with rig(tmp_path) as r:
        good = r.ca.issue(WEB_ID)
        r.broker.set_svids("default/web-1", [good])
        await r.add_pod("web-1")
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        for what, mint, reason in cases:
            r.broker.set_svids("default/web-1", [mint(r.ca)])
            state = await until(r.journal, functools.partial(_rejected_for, reason))
            rejection = state.diagnostics.rejections[f"svid/{WEB_ID}"]
            assert rejection.reason is RejectionReason.INVALID_SVID, what
            assert state.identity.svids[WEB_ID].cert_chain_pem == good.cert_chain_pem, what


def _rejected_for(reason: str, state: State) -> bool:
    return any(reason in rejection.message for rejection in state.diagnostics.rejections.values())


async def test_an_svid_that_expires_while_nothing_happens_stops_being_served(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        now = time.time_ns()
        short = r.ca.issue(WEB_ID, not_after=now + 2 * 10**9)  # expires in about two seconds
        r.broker.set_svids("default/web-1", [short])
        await r.add_pod("web-1")
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        state = await until(r.journal, lambda s: WEB_ID not in s.identity.svids)
        assert "expired" in state.diagnostics.rejections[f"svid/{WEB_ID}"].message


async def test_the_broker_down_at_start_and_mid_stream_keeps_the_last_good_svid(tmp_path: Path) -> None:
    async with rig(tmp_path, broker_up=False) as r:
        good = r.ca.issue(WEB_ID)
        r.broker.set_svids("default/web-1", [good])
        await r.add_pod("web-1")
        await counted(lambda: r.client.statistics().failures, 2)
        await r.nursery.start(r.broker.serve, r.broker_socket)
        await until(r.journal, lambda s: WEB_ID in s.identity.svids)
        connects = r.client.statistics().connects
        await r.broker.stop()
        await counted(lambda: r.client.statistics().failures, 3)
        assert WEB_ID in r.journal.state.identity.svids, (
            "the last good SVID stays served while the broker is down"
        )
        rotated = r.ca.issue(WEB_ID)
        r.broker.set_svids("default/web-1", [rotated])
        await r.nursery.start(r.broker.serve, r.broker_socket)
        await until(r.journal, lambda s: s.identity.svids[WEB_ID].cert_chain_pem == rotated.cert_chain_pem)
        assert r.client.statistics().connects > connects


def test_identity_ready_asks_for_the_document_the_agent_serves() -> None:
    assert identity_ready_command.IDENTITY_DOCUMENT == IDENTITY_DOCUMENT


async def test_a_broker_endpoint_of_another_identity_is_refused(tmp_path: Path) -> None:
    """The broker authenticates the server too (the Broker Endpoint spec): a pinned ID that differs is refused."""
    ca = TestCA(TD)
    workload = FakeWorkloadApi(ca, svids=[ca.issue(AGENT_ID)])
    broker = FakeBroker(ca, directory=tmp_path / "broker", broker_id=f"spiffe://{TD}/impostor")
    async with open_journal(tmp_path / "log") as journal, trio.open_nursery() as nursery:
        await nursery.start(workload.serve, tmp_path / "workload.sock")
        await nursery.start(broker.serve, tmp_path / "broker.sock")
        identity = await nursery.start(
            functools.partial(
                serve_workload_api, tmp_path / "workload.sock", send=journal.sender(), backoff=FAST
            )
        )
        client = BrokerClient(
            socket=tmp_path / "broker.sock",
            identity=identity,
            send=journal.sender(),
            server_id=f"spiffe://{TD}/spire/agent/broker",
            backoff=FAST,
        )
        journal.subscribe(client.follow)
        nursery.start_soon(client.serve)
        await counted(lambda: client.statistics().failures, 2)
        assert client.statistics().connects == 0
        assert "impostor" in client.statistics().last_error
        nursery.cancel_scope.cancel()


async def start_spiffe_agent_and_registrar(
    tmp_path: Path,
    nursery: trio.Nursery,
    *,
    workload: FakeWorkloadApi,
    registrar_ca: TestCA,
    clients_ca: TestCA,
) -> RunningAgent:
    """Start `workload` (the agent's Workload API), a registrar over mTLS (its certificate of `registrar_ca`,
    trusting clients of `clients_ca`, authorizing by SPIFFE ID) and an agent of node-a with `registrar_spiffe`."""
    registrar = registrar_ca.issue(f"spiffe://{TD}/ns/aether-system/sa/aether-registrar")
    for name, content in (
        ("registrar.pem", registrar.cert_chain_pem),
        ("registrar.key", registrar.private_key_pem),
        ("bundle.pem", clients_ca.bundle_pem),
    ):
        (tmp_path / name).write_bytes(content)
    await nursery.start(workload.serve, tmp_path / "workload.sock")
    address = await nursery.start(
        functools.partial(
            serve_registrar,
            backend=MemoryBackend(),
            listen=ListenAddress.tcp(host="127.0.0.1", port=0),
            tls=server_tls_context(
                certificate=tmp_path / "registrar.pem",
                key=tmp_path / "registrar.key",
                bundle=tmp_path / "bundle.pem",
            ),
            trust_domain=TD,
        )
    )
    config = AgentConfig(
        node_name="node-a",
        log_dir=tmp_path / "log",
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        registrar=address,
        spiffe_workload_socket=tmp_path / "workload.sock",
        registrar_spiffe=True,
    )
    agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
    return agent


async def test_the_agent_presents_its_workload_api_svid_to_the_registrar(tmp_path: Path) -> None:
    """`registrar_spiffe`: the agent's mTLS identity towards a registrar that authorizes by it comes from the
    Workload API (no certificate files), and its pod is registered and watched back over that connection."""
    ca = TestCA(TD)
    workload = FakeWorkloadApi(ca, svids=[ca.issue(agent_spiffe_id("node-a", trust_domain=TD))])
    async with trio.open_nursery() as nursery:
        agent = await start_spiffe_agent_and_registrar(
            tmp_path, nursery, workload=workload, registrar_ca=ca, clients_ca=ca
        )
        web = make_pod(
            "web-1", namespace="shop", service_account="web", ips=("127.0.10.1",), node_name="node-a"
        )
        async with agent.journal.sender() as send:
            await send.send(pod_added(web))
        await until(
            agent.journal,
            lambda s: "127.0.10.1" in {ip for _, ip in s.registry.endpoints_of("shop/web")},
        )
        assert agent.registrations is not None
        assert agent.registrations.statistics().registered == 1
        nursery.cancel_scope.cancel()
