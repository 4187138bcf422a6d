"""Admission webhook review latency: p50/p99 of AdmissionReviews sent at a fixed rate (200/s for 10 s by default)
over keep-alive TLS connections, as kube-apiserver sends them, to `aether controller`'s webhook server.

The server runs in a child process (the client must not share its event loop). Reviews are a mix of the three kinds
the webhooks see: a valid HTTPRoute, an HTTPRoute denied for an uncompilable regex, and a Pod to mutate. Latency is
taken from each review's scheduled send time (open loop: a slow answer delays no later send, so queueing counts).

The reference, measured in the same run against the same server: the same bodies POSTed to a path no webhook serves,
answered with a static 404 after the body is read (TLS, HTTP and the connection's cost without any review),
before and after the reviews. The server's CPU per request (from /proc) is printed too: on a shared machine it
moves far less than the latency tail.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

import h11
import trio
from _common import write_results

from aether.controller import PodMutation, WebhookServer, generate_serving_certificate

RATE = 200
DURATION = 10.0
CONNECTIONS = 8
SERVER_NAME = "aether-controller.aether-system.svc"


def _review(kind: str, group: str, obj: dict[str, object]) -> bytes:
    request = {
        "uid": "bench",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "namespace": "shop",
        "operation": "CREATE",
        "object": obj,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def _route(name: str, path: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "parentRefs": [{"name": "edge", "namespace": "edge"}],
            "rules": [{"matches": [{"path": path}], "backendRefs": [{"name": "web", "port": 80}]}],
        },
    }


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"}},
    "spec": {"containers": [{"name": "web", "image": "web:1", "ports": [{"containerPort": 8080}]}]},
}
REVIEWS = (
    (
        "/validate-route",
        _review("HTTPRoute", "gateway.networking.k8s.io", _route("ok", {"type": "PathPrefix", "value": "/"})),
    ),
    (
        "/validate-route",
        _review(
            "HTTPRoute",
            "gateway.networking.k8s.io",
            _route("bad", {"type": "RegularExpression", "value": "/(x"}),
        ),
    ),
    ("/mutate-pod", _review("Pod", "", POD)),
)


async def _serve(server: WebhookServer) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: server.serve(host="127.0.0.1", port=0, task_status=task_status)
        )
        print(port, flush=True)


class _Connection:
    def __init__(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self.http = h11.Connection(h11.CLIENT)

    async def post(self, path: str, body: bytes) -> int:
        headers = [
            ("Host", SERVER_NAME),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
        ]
        data = b"".join(
            self.http.send(event) or b""
            for event in (
                h11.Request(method="POST", target=path, headers=headers),
                h11.Data(data=body),
                h11.EndOfMessage(),
            )
        )
        await self.stream.send_all(data)
        status = 0
        while True:
            event = self.http.next_event()
            if event is h11.NEED_DATA:
                self.http.receive_data(bytes(await self.stream.receive_some(65536)))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                self.http.start_next_cycle()
                return status
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the server closed the connection")


async def _load(port: int, ca_pem: bytes, *, reference: bool, rate: int, duration: float) -> list[float]:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    idle: trio.MemorySendChannel[_Connection]
    idle, pool = trio.open_memory_channel[_Connection](CONNECTIONS)
    for _ in range(CONNECTIONS):
        stream = trio.SSLStream(
            await trio.open_tcp_stream("127.0.0.1", port), context, server_hostname=SERVER_NAME
        )
        await stream.do_handshake()
        idle.send_nowait(_Connection(stream))
    latencies: list[float] = []
    expected = 404 if reference else 200

    async def one(index: int, scheduled: float) -> None:
        connection = await pool.receive()  # kube-apiserver's pool: a busy connection makes the review wait
        path, body = REVIEWS[index % len(REVIEWS)]
        status = await connection.post("/reference" if reference else path, body)
        assert status == expected, status
        latencies.append(trio.current_time() - scheduled)
        idle.send_nowait(connection)

    start = trio.current_time() + 0.1
    async with trio.open_nursery() as nursery:
        for index in range(int(rate * duration)):
            scheduled = start + index / rate
            await trio.sleep_until(scheduled)
            nursery.start_soon(one, index, scheduled)
    return sorted(latencies)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 s instead of 10 s")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.serve is not None:
        pair = generate_serving_certificate(now=datetime.datetime.now(datetime.UTC))
        arguments.serve.write_bytes(pair.ca_pem)
        trio.run(
            _serve,
            WebhookServer(ssl_context=pair.server_context(), mutation=PodMutation(image="aether:bench")),
        )
        return
    duration = 2.0 if arguments.quick else DURATION
    ca_file = Path(tempfile.mkdtemp(prefix="bench-webhooks-")) / "ca.pem"
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(ca_file)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        ca_pem = ca_file.read_bytes()
        figures: dict[str, float] = {}
        for name, reference in (("reference", True), ("review", False), ("reference_again", True)):
            load = functools.partial(_load, port, ca_pem, reference=reference, rate=RATE, duration=duration)
            cpu = _cpu_seconds(server.pid)
            latencies = trio.run(load)
            figures[f"{name}_server_cpu_us_each"] = (_cpu_seconds(server.pid) - cpu) / len(latencies) * 1e6
            figures[f"{name}_p50_ms"] = _percentile(latencies, 0.50) * 1000
            figures[f"{name}_p99_ms"] = _percentile(latencies, 0.99) * 1000
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(ca_file.parent)
    reference_p99 = min(figures["reference_p99_ms"], figures["reference_again_p99_ms"])
    reference_p50 = min(figures["reference_p50_ms"], figures["reference_again_p50_ms"])
    figures["p99_ratio_review_over_reference"] = figures["review_p99_ms"] / reference_p99
    figures["p50_ratio_review_over_reference"] = figures["review_p50_ms"] / reference_p50
    reference_cpu = min(
        figures["reference_server_cpu_us_each"], figures["reference_again_server_cpu_us_each"]
    )
    figures["cpu_ratio_review_over_reference"] = figures["review_server_cpu_us_each"] / reference_cpu
    for name, value in figures.items():
        print(f"{name:36} {value:10.3f}")
    sizes = {
        "rate_per_s": RATE,
        "duration_s": duration,
        "reviews": int(RATE * duration),
        "connections": CONNECTIONS,
    }
    write_results("webhooks_quick" if arguments.quick else "webhooks", {**sizes, **figures})


if __name__ == "__main__":
    main()
