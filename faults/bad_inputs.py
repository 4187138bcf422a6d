"""Random bad inputs on every interface of running processes, then a check that nothing was hurt: `bad_inputs`.

The interfaces: the edge's xDS socket (ADS streams of junk, or of good requests cut off mid-answer), the registrar's
RPCs (junk bytes, well-formed requests with bad values), the `aether-cni` plugin (stdin and environment) and the
agent's CNI service, mesh-dns (UDP packets), and the edge's watched manifest directory (documents it must refuse).
An input "crashes" when its process exits, a handler fails with an error that is not a refusal (gRPC UNKNOWN or
INTERNAL), or the plugin answers "this is a bug" or nothing. Afterwards the edge's Envoy must still follow a route
change, and every state must hold exactly the good inputs.
"""

from __future__ import annotations

import functools
import json
import random
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import dnslib
import grpc
import trio
import yaml
from envoy.service.discovery.v3 import discovery_pb2

from aether.cni.api import SERVICE_NAME as CNI_SERVICE
from aether.proto.cni.v1 import cni_pb2
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar import SERVICE_NAME as REGISTRAR_SERVICE
from aether.testing.xds_resources import pick_free_port
from faults.processes import POLL, START_TIMEOUT, RoleFailed, RoleProcess, running
from faults.registrar_kills import list_endpoints, registrar_role
from faults.restarts import EDGE_POD, Scene, open_edge_scene, wait_answered
from tests.cni.conftest import environment, run_cni_process
from tests.registrar._grpc import call, registration

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService"
RPC_TIMEOUT = 10.0
"""Seconds one bad call may take before it counts as a hang (a refusal takes milliseconds)."""
NOT_REFUSALS = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
"""gRPC statuses that mean a handler raised instead of refusing (purerpc reports an uncaught exception so)."""
TOOK_BAD_INPUT = grpc.StatusCode.DATA_LOSS
"""What a sender reports when a server answered anything but INVALID_ARGUMENT to an input it must refuse."""
MESH_DOMAIN = "aether.internal"
DNS_RECORD = ("shop/cart", "10.96.0.20")
"""The one record mesh-dns serves: `cart.shop.aether.internal` → 10.96.0.20."""
SHARES = {"xds": 4, "registrar": 4, "cni-plugin": 1, "cni-server": 2, "mesh-dns": 6, "manifests": 3}
"""How the inputs are spread over the interfaces (the plugin is a process per input, so it gets fewer)."""
MANIFEST_ROUNDS = 10
"""At most this many readings of the manifest directory carry the bad documents (each takes a poll, about 1 s)."""
MANIFEST_DOCUMENTS = 20
"""Bad documents per reading, when there are enough for several readings."""


@attrs.frozen(kw_only=True)
class BadInputFigures:
    """What the bad-input run measured."""

    tried: Mapping[str, int]
    """Bad inputs sent, by interface."""
    crashes: tuple[str, ...]
    """Each crash, described (the aim: none)."""
    checks: Mapping[str, bool]
    """The checks made afterwards (route change reached Envoy, each state holds exactly the good inputs)."""

    @property
    def total(self) -> int:
        return sum(self.tried.values())

    def lines(self) -> list[str]:
        per_interface = ", ".join(f"{name} {count}" for name, count in sorted(self.tried.items()))
        checks = ", ".join(
            f"{name}: {'ok' if passed else 'FAILED'}" for name, passed in sorted(self.checks.items())
        )
        return [
            f"bad inputs: {self.total} tried ({per_interface}), {len(self.crashes)} crashes (aim 0)",
            f"  afterwards: {checks}",
            *(f"  crash: {crash}" for crash in self.crashes[:20]),
        ]


# --- the bad inputs ---


def junk(rng: random.Random, *, valid: bytes = b"") -> bytes:
    """Bytes no parser should accept whole: 0xff runs, random bytes, a valid message flipped or cut, length bombs."""
    family = rng.randrange(5)
    if family == 0:
        return b"\xff" * rng.randint(1, 64)
    if family == 1:
        return rng.randbytes(rng.randint(0, 300))
    if family == 2 and valid:
        mutated = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        return bytes(mutated)
    if family == 3 and valid:
        return valid[: rng.randrange(len(valid))]
    # A length-delimited field that claims far more than follows (a varint of 2^63 - 1).
    return bytes([rng.choice((0x0A, 0x12, 0x1A, 0x22))]) + b"\xff" * 8 + b"\x7f" + rng.randbytes(4)


def _raw(channel: grpc.Channel, path: str, *, stream: str) -> Any:
    """A callable for `path` that sends and receives raw bytes (the junk goes out as it is)."""
    factory = {"unary": channel.unary_unary, "server": channel.unary_stream, "both": channel.stream_stream}[
        stream
    ]
    return factory(path, request_serializer=None, response_deserializer=None)


def _status(call: Callable[[], object]) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def _ads_stream(target: str, messages: list[bytes], *, delta: bool, answers: int) -> grpc.StatusCode:
    """Open one ADS stream, send `messages`, read `answers` responses (then cancel the stream: a client gone
    mid-answer), or read to the end when `answers` is 0; return how the stream ended."""
    method = "DeltaAggregatedResources" if delta else "StreamAggregatedResources"
    with grpc.insecure_channel(target) as channel:
        responses = _raw(channel, f"{ADS}/{method}", stream="both")(iter(messages), timeout=RPC_TIMEOUT)

        def read() -> None:
            for count, _ in enumerate(responses, start=1):
                if answers and count >= answers:
                    responses.cancel()
                    return

        return _status(read)


def _ads_request(rng: random.Random, *, delta: bool) -> bytes:
    """A well-formed first request of the edge's node for one type (what a restarting Envoy sends)."""
    type_url = rng.choice(
        (
            "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "type.googleapis.com/envoy.config.listener.v3.Listener",
        )
    )
    if delta:
        delta_request = discovery_pb2.DeltaDiscoveryRequest(type_url=type_url)
        delta_request.node.id = EDGE_POD
        return bytes(delta_request.SerializeToString())
    request = discovery_pb2.DiscoveryRequest(type_url=type_url)
    request.node.id = EDGE_POD
    return bytes(request.SerializeToString())


def xds_inputs(rng: random.Random, target: str) -> Callable[[], grpc.StatusCode]:
    """One bad ADS stream: junk as the first or a later message, or good requests cut off mid-answer."""
    delta = rng.random() < 0.5
    good = [_ads_request(rng, delta=delta) for _ in range(rng.randint(1, 4))]
    shape = rng.randrange(3)
    if shape == 0:
        messages, answers = [junk(rng, valid=good[0])], 0
    elif shape == 1:
        messages, answers = [*good[:1], junk(rng, valid=good[0])], 0
    else:
        messages, answers = good, rng.randint(1, 2)
    return functools.partial(_ads_stream, target, messages, delta=delta, answers=answers)


_BAD_IPS = ("fe80::1%eth0", "10.0.0.256", " 10.0.0.1", "010.0.0.1", "::ffff:10.0.0.1x", "", "a" * 300)
_BAD_SERVICES = ("", "Shop/Web", "shop", "shop/web/extra", "shop/" + "w" * 300, "shop/we_b")


def bad_registration(rng: random.Random) -> pb.RegisterEndpointRequest:
    """A well-formed RegisterEndpoint whose values the registrar must refuse (INVALID_ARGUMENT)."""
    request = registration(f"10.201.0.{rng.randint(1, 250)}")
    flaw = rng.randrange(3)
    if flaw == 0:
        request.endpoint.ip = rng.choice(_BAD_IPS)
    elif flaw == 1:
        request.service_name = rng.choice(_BAD_SERVICES)
    else:
        request.endpoint.port = rng.choice((0, 65536, 2**32 - 1))
    return request


def registrar_inputs(rng: random.Random, target: str) -> Callable[[], grpc.StatusCode]:
    """One bad registrar call: junk bytes to any method, or a registration with a bad value."""
    must_refuse = rng.random() < 0.4
    if must_refuse:
        request = bad_registration(rng).SerializeToString()
        method, stream = "RegisterEndpoint", "unary"
    else:
        method, stream = rng.choice(
            (
                ("RegisterEndpoint", "unary"),
                ("UnregisterEndpoint", "unary"),
                ("ListAllEndpoints", "unary"),
                ("WatchEndpoints", "server"),
            )
        )
        request = junk(rng, valid=registration("10.201.0.1").SerializeToString())

    def send() -> grpc.StatusCode:
        with grpc.insecure_channel(target) as channel:
            answer = _raw(channel, f"/{REGISTRAR_SERVICE}/{method}", stream=stream)

            def once() -> None:
                result = answer(request, timeout=RPC_TIMEOUT)
                if stream == "server":
                    next(iter(result), None)
                    result.cancel()

            code = _status(once)
        if must_refuse and code != grpc.StatusCode.INVALID_ARGUMENT:
            # Junk may happen to parse into a good request; a registration with a bad value must be refused.
            return TOOK_BAD_INPUT
        return code

    return send


def cni_server_inputs(rng: random.Random, target: str) -> Callable[[], grpc.StatusCode]:
    """One bad call to the agent's CNI service: junk bytes to any of its methods."""
    method = rng.choice(("AddPod", "RemovePod", "CheckPod", "CollectGarbage", "Status"))
    valid = cni_pb2.AddPodRequest().SerializeToString()
    request = junk(rng, valid=valid or b"\x0a\x03pod")

    def send() -> grpc.StatusCode:
        with grpc.insecure_channel(target) as channel:
            return _status(
                lambda: _raw(channel, f"/{CNI_SERVICE}/{method}", stream="unary")(
                    request, timeout=RPC_TIMEOUT
                )
            )

    return send


_HUGE = "<a 5,001-digit integer>"


def cni_plugin_input(rng: random.Random, socket_path: Path) -> tuple[dict[str, str], bytes]:
    """One bad `aether-cni` run: an environment and a stdin, one of them wrong (no NUL in the environment: a
    runtime cannot pass one to exec)."""
    command = rng.choice(("ADD", "DEL", "CHECK", "GC", "STATUS"))
    env = environment(command, netns=None) | {"CNI_NETNS": "/run/netns/never-made"}
    config: dict[str, Any] = {"cniVersion": "1.0.0", "name": "net", "agentSocket": str(socket_path)}
    flaw = rng.randrange(6)
    if flaw == 0:
        return env, junk(rng, valid=json.dumps(config).encode())
    if flaw == 1:
        return env, rng.choice((b"[", b'{"a":')) * rng.randint(1_000, 100_000)
    if flaw == 2:
        config["prevResult"] = {
            "cniVersion": "1.0.0",
            "ips": rng.choice(({"a": 1}, 5, "x", [{"address": 7}])),
        }
    elif flaw == 3:
        config[rng.choice(("cniVersion", "name", "agentSocket"))] = rng.choice((_HUGE, None, [], {"x": 1}))
    elif flaw == 4:
        env[rng.choice(("CNI_NETNS", "CNI_CONTAINERID", "CNI_IFNAME", "CNI_ARGS"))] = rng.choice(
            ("/run/netns/" + "n" * 300, "", "../..", "K8S_POD_NAME", "a=b;" * 5000)
        )
    else:
        env["CNI_COMMAND"] = rng.choice(("", "add", "BOGUS", "ADD\n"))
    # A 5,001-digit integer (defect 8): json.dumps cannot write one, so it goes in as text.
    return env, json.dumps(config).replace(json.dumps(_HUGE), "1" + "0" * 5000).encode()


def dns_packet(rng: random.Random) -> bytes:
    """One bad DNS packet: junk, a good query flipped or cut, or a header that promises what does not follow."""
    query = bytes(dnslib.DNSRecord.question(f"cart.shop.{MESH_DOMAIN}").pack())
    if rng.random() < 0.2:
        # A question count of 65535, or a compression pointer to itself.
        header = query[:4] + rng.choice((b"\xff\xff", b"\x00\x01")) + query[6:12]
        return header + rng.choice((b"\xc0\x0c\x00\x01\x00\x01", query[12:], b""))
    return junk(rng, valid=query)


def _scalar(rng: random.Random) -> object:
    """A value of the wrong type or range for any field the reader checks (not null: null is "absent")."""
    return rng.choice((10**27, -1, 2**64, -(2**63) - 1, 1.5, "x" * 5, [], {"a": []}, True))


def bad_document(rng: random.Random, index: int) -> object:
    """A parseable manifest document the edge must refuse: out-of-range or mistyped fields, names that are not
    names, unknown shapes. Each keeps a name of its own (`bad-<index>`) where it has one, so no refusal can hide a
    good object."""
    name = f"bad-{index}"
    flaw = rng.randrange(6)
    if flaw == 0:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default", "generation": _scalar(rng)},
            "spec": {"ports": [{"port": 80}]},
        }
    if flaw == 1:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"port": rng.choice((-1, 2**32, 2**64, "http", None))}]},
        }
    if flaw == 2:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": rng.choice(("Bad_Name", "", "x" * 300, "-a", 7)), "namespace": "default"},
        }
    if flaw == 3:
        return {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": "default"},
            # Not a mapping: a mapping of unknown fields is a valid route (the API server prunes such fields).
            "spec": rng.choice((1.5, "x" * 5, [], True, 10**27)),
        }
    if flaw == 4:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"aether.io/managed": "true"}},
            "spec": {"serviceAccountName": "Not A Name"},
            "status": {"podIP": rng.choice(("fe80::1%eth0", "10.0.0.999", 5))},
        }
    return {"apiVersion": "v1", "kind": rng.choice(("Service", "Pod", "List")), "metadata": _scalar(rng)}


ALIAS_BOMB = "\n".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x]",
        *(
            f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join(['*' + chr(97 + level)] * 9)}]"
            for level in range(7)
        ),
    ]
)
"""About 1 KB of YAML that expands to 9^8 scalars (defect 6): the reader must refuse it before expanding it."""


def bad_manifest_file(rng: random.Random, *, start: int, count: int) -> str:
    """A manifest file of `count` bad documents (numbered from `start`), YAML that does not parse, or a bomb."""
    roll = rng.random()
    if roll < 0.15:
        return ALIAS_BOMB
    if roll < 0.3:
        return rng.choice(("kind: [unclosed\n", "a: b: c\n", "\t- x\n", "%YAML 9.9\n---\na: 1\n", "{" * 5000))
    return yaml.safe_dump_all([bad_document(rng, start + offset) for offset in range(count)])


# --- running them ---

GOOD_REGISTRATIONS = frozenset({"10.200.0.1", "10.200.0.2", "10.200.0.3"})
"""The endpoints of `shop/web` registered before the bad inputs: all the registrar may hold afterwards."""
GOOD_MANIFESTS = {"pods": 2, "kube_services": 2, "gateway_objects": 3}
"""What the edge's good manifests hold: two backends (a Pod and a Service each), a GatewayClass, a Gateway, a route."""


@attrs.frozen(kw_only=True)
class Targets:
    """The running processes the bad inputs go to."""

    edge: Scene
    """`aether edge` with its Envoy carrying traffic: xDS and the watched manifest directory."""
    registrar: RoleProcess
    agent: RoleProcess
    """`aether agent` serving only its CNI service (the plugin dials it too)."""
    dns: RoleProcess
    dns_port: int

    @property
    def cni_socket(self) -> Path:
        return self.agent.work_dir / "cni.sock"

    def roles(self) -> tuple[RoleProcess, ...]:
        return (self.edge.plane, self.registrar, self.agent, self.dns)


def _agent_role(work_dir: Path) -> RoleProcess:
    arguments = ["agent", "--node-name", "node-faults", "--log-dir", str(work_dir / "log")]
    arguments += ["--xds", f"unix:{work_dir / 'xds.sock'}", "--admin-socket", str(work_dir / "admin.sock")]
    arguments += ["--cni-socket", str(work_dir / "cni.sock")]
    return RoleProcess(
        name="agent", arguments=arguments, admin_socket=work_dir / "admin.sock", work_dir=work_dir
    )


def _dns_role(work_dir: Path, *, port: int) -> RoleProcess:
    """`aether mesh-dns` on 127.0.0.1:`port` serving `DNS_RECORD`, forwarding the rest to a port nobody serves."""
    work_dir.mkdir(parents=True, exist_ok=True)
    records = {"writtenAt": "2026-12-01T00:00:00Z", "generation": 1, "records": dict([DNS_RECORD])}
    (work_dir / "records.json").write_text(json.dumps(records))
    arguments = ["mesh-dns", "--records", str(work_dir / "records.json"), "--listen", f"127.0.0.1:{port}"]
    arguments += ["--upstream", f"127.0.0.1:{pick_free_port()}"]
    return RoleProcess(name="mesh-dns", arguments=arguments, admin_socket=None, work_dir=work_dir)


@asynccontextmanager
async def open_targets(work_dir: Path) -> AsyncIterator[Targets]:
    """Start the edge scene, a registrar (holding `GOOD_REGISTRATIONS`), an agent and mesh-dns; yield once each
    answers. They boot side by side: each is exec'd first, and waited for afterwards."""
    port = pick_free_port()
    async with (
        running(registrar_role(work_dir / "registrar")) as registrar,
        running(_agent_role(work_dir / "agent")) as agent,
        running(_dns_role(work_dir / "dns", port=port)) as dns,
        open_edge_scene(work_dir / "edge") as scene,
    ):
        targets = Targets(edge=scene, registrar=registrar, agent=agent, dns=dns, dns_port=port)
        await list_endpoints(registrar)
        for ip in sorted(GOOD_REGISTRATIONS):
            socket_path = registrar.work_dir / "registrar.sock"
            await trio.to_thread.run_sync(call, socket_path, "RegisterEndpoint", registration(ip))
        await agent.wait_answering()
        await _wait_dns(targets)
        yield targets


async def _dns_answer(port: int) -> str | None:
    """Ask mesh-dns for `cart.shop.aether.internal` over UDP; return the A record's address (None: no answer)."""
    query = dnslib.DNSRecord.question(f"cart.shop.{MESH_DOMAIN}")
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        await client.connect(("127.0.0.1", port))
        await client.send(query.pack())
        with trio.move_on_after(1.0):
            reply = dnslib.DNSRecord.parse(await client.recv(4096))
            return next((str(record.rdata) for record in reply.rr if record.rtype == dnslib.QTYPE.A), None)
    return None


async def _wait_dns(targets: Targets) -> None:
    with trio.move_on_after(START_TIMEOUT):
        while await _dns_answer(targets.dns_port) != DNS_RECORD[1]:
            targets.dns.check_alive()
            await trio.sleep(POLL)
        return
    raise RoleFailed(f"mesh-dns did not answer within {START_TIMEOUT} s:\n{targets.dns.stderr_tail()}")


def _manifest_counts(state: Mapping[str, Any]) -> dict[str, int]:
    return {name: int(state[name]) for name in GOOD_MANIFESTS}


async def _manifest_readings(edge: RoleProcess) -> int:
    counters = (await edge.admin("/statistics"))["manifests"]
    return int(counters["readings"]) + int(counters["failed_readings"])


async def _wait_reading(edge: RoleProcess, after: int) -> None:
    """Wait until the edge has read its directory again since it had made `after` readings."""
    with trio.move_on_after(START_TIMEOUT):
        while await _manifest_readings(edge) <= after:
            edge.check_alive()
            await trio.sleep(POLL)
        return
    raise RoleFailed(f"edge did not read its manifests within {START_TIMEOUT} s:\n{edge.stderr_tail()}")


@attrs.define
class _Tally:
    """Inputs tried and crashes seen, by interface."""

    tried: dict[str, int] = attrs.Factory(dict)
    crashes: list[str] = attrs.Factory(list)

    def count(self, interface: str, inputs: int = 1) -> None:
        self.tried[interface] = self.tried.get(interface, 0) + inputs

    def crash(self, interface: str, description: str) -> None:
        self.crashes.append(f"{interface} input {self.tried.get(interface, 0)}: {description}")


async def _rpc_inputs(
    tally: _Tally,
    interface: str,
    make: Callable[[random.Random, str], Callable[[], grpc.StatusCode]],
    *,
    count: int,
    rng: random.Random,
    socket_path: Path,
    role: RoleProcess,
) -> None:
    """Send `count` bad calls made by `make` to the gRPC server on `socket_path` (of `role`)."""
    for _ in range(count):
        send = make(rng, f"unix:{socket_path}")
        tally.count(interface)
        code = await trio.to_thread.run_sync(send)
        if code in NOT_REFUSALS:
            tally.crash(interface, f"answered {code.name}: a handler raised instead of refusing")
        elif code == TOOK_BAD_INPUT:
            tally.crash(interface, "a request with a bad value was not refused with INVALID_ARGUMENT")
        if not role.alive():
            tally.crash(interface, f"{role.name} exited: {role.stderr_tail()}")
            return


async def _cni_plugin_inputs(tally: _Tally, *, count: int, rng: random.Random, targets: Targets) -> None:
    """Run `aether-cni` `count` times on bad input: each must answer the spec's error object (never code 999)."""
    for _ in range(count):
        env, stdin = cni_plugin_input(rng, targets.cni_socket)
        tally.count("cni-plugin")
        run = await run_cni_process(env, stdin)
        if not _plugin_answer_is_right(env["CNI_COMMAND"], status=run.status, output=run.output):
            tally.crash(
                "cni-plugin",
                f"{env['CNI_COMMAND']!r} exited {run.status}, answered {run.output!r:.300} (stdin {stdin[:80]!r})",
            )


_SILENT_ON_SUCCESS = frozenset({"DEL", "CHECK", "GC", "STATUS"})
"""CNI commands that print nothing when they succeed (the CNI spec); ADD prints its result."""


def _plugin_answer_is_right(command: str, *, status: int, output: Mapping[str, Any] | None) -> bool:
    """A refusal is exit status non-zero with the spec's error object (never code 999, "this is a bug"); a result
    is status 0 with a result object, or nothing for the commands that print nothing."""
    if status != 0:
        return output is not None and "code" in output and output["code"] != 999 and "msg" in output
    if output is None:
        return command in _SILENT_ON_SUCCESS
    return "code" not in output


async def _dns_inputs(tally: _Tally, *, count: int, rng: random.Random, targets: Targets) -> None:
    """Send `count` bad packets to mesh-dns over UDP."""
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        await client.connect(("127.0.0.1", targets.dns_port))
        for _ in range(count):
            tally.count("mesh-dns")
            await client.send(dns_packet(rng))
            await trio.lowlevel.checkpoint()
    if not targets.dns.alive():
        tally.crash("mesh-dns", f"mesh-dns exited: {targets.dns.stderr_tail()}")


async def _manifest_inputs(tally: _Tally, *, count: int, rng: random.Random, targets: Targets) -> None:
    """Put `count` bad documents (in readings of up to `MANIFEST_DOCUMENTS`) in the edge's manifest directory, one
    file a reading; after each reading the edge must hold the good objects only. The file goes at the end."""
    edge = targets.edge.plane
    bad_file = edge.work_dir / "manifests" / "bad.yaml"
    rounds = max(1, min(MANIFEST_ROUNDS, count // MANIFEST_DOCUMENTS))
    for round_index in range(rounds):
        before = await _manifest_readings(edge)
        bad = bad_manifest_file(rng, start=round_index * (count // rounds), count=max(1, count // rounds))
        await trio.Path(bad_file).write_text(bad)
        tally.count("manifests", len(list(yaml.safe_load_all(bad))) if bad.startswith("apiVersion") else 1)
        await _wait_reading(edge, before)
        held = _manifest_counts(await edge.admin("/state"))
        if held != GOOD_MANIFESTS:
            tally.crash(
                "manifests", f"the edge took a bad document: it holds {held} (good: {GOOD_MANIFESTS})"
            )
    before = await _manifest_readings(edge)
    await trio.Path(bad_file).unlink()
    await _wait_reading(edge, before)


async def _checks(targets: Targets) -> dict[str, bool]:
    """After the bad inputs: a route change reaches Envoy, and each state holds exactly the good inputs."""
    routes = trio.Path(targets.edge.plane.work_dir / "manifests" / "routes.yaml")
    await routes.write_text((await routes.read_text()).replace("name: alpha", "name: beta"))
    checks: dict[str, bool] = {}
    try:
        await wait_answered(attrs.evolve(targets.edge.target, expect="beta"))
        checks["route change reached envoy"] = True
    except trio.TooSlowError:
        checks["route change reached envoy"] = False
    held = _manifest_counts(await targets.edge.plane.admin("/state"))
    checks["edge state is the good manifests"] = held == GOOD_MANIFESTS
    checks["registrar holds the good registrations"] = (
        await list_endpoints(targets.registrar) == GOOD_REGISTRATIONS
    )
    checks["mesh-dns answers its record"] = await _dns_answer(targets.dns_port) == DNS_RECORD[1]
    status = await trio.to_thread.run_sync(cni_status, f"unix:{targets.cni_socket}")
    checks["cni service answers Status"] = status == grpc.StatusCode.OK
    return checks


def cni_status(target: str) -> grpc.StatusCode:
    """A good `Status` call to the agent's CNI service at `target`."""
    with grpc.insecure_channel(target) as channel:
        request = cni_pb2.StatusRequest().SerializeToString()
        return _status(
            lambda: _raw(channel, f"/{CNI_SERVICE}/Status", stream="unary")(request, timeout=RPC_TIMEOUT)
        )


async def bad_inputs(work_dir: Path, *, count: int, seed: int = 13) -> BadInputFigures:
    """Send about `count` bad inputs spread over every interface (`SHARES`), then make the checks (`_checks`).

    Raises:
        RoleFailed: A process did not start, or stopped answering while its inputs were checked.
    """
    rng = random.Random(seed)
    quota = {name: max(1, count * share // sum(SHARES.values())) for name, share in SHARES.items()}
    tally = _Tally()
    async with open_targets(work_dir) as targets:
        sockets = {
            "xds": (xds_inputs, targets.edge.plane.work_dir / "xds.sock", targets.edge.plane),
            "registrar": (registrar_inputs, targets.registrar.work_dir / "registrar.sock", targets.registrar),
            "cni-server": (cni_server_inputs, targets.cni_socket, targets.agent),
        }
        for interface, (make, socket_path, role) in sockets.items():
            await _rpc_inputs(
                tally, interface, make, count=quota[interface], rng=rng, socket_path=socket_path, role=role
            )
        await _cni_plugin_inputs(tally, count=quota["cni-plugin"], rng=rng, targets=targets)
        await _dns_inputs(tally, count=quota["mesh-dns"], rng=rng, targets=targets)
        await _manifest_inputs(tally, count=quota["manifests"], rng=rng, targets=targets)
        checks = await _checks(targets)
        for role in targets.roles():
            if not role.alive():
                tally.crash(role.name, f"exited: {role.stderr_tail()}")
    return BadInputFigures(tried=tally.tried, crashes=tuple(tally.crashes), checks=checks)
