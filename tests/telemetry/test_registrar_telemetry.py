"""Registrations traced through the registrar to its watchers, through a real collector: the agent's call carries
its span in `traceparent` (gRPC metadata); the registrar's span of the call is its child, with the store write
and the fan-out to the watchers as children of that. A malformed traceparent starts a root of the registrar's
own; a caller's unsampled one leaves the registrar's work out too."""

from __future__ import annotations

from pathlib import Path

import grpc
import trio

from aether.proto.otlp.v1 import otlp_pb2 as otlp
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar import SERVICE_NAME
from aether.rpc.calls import open_grpc_socket, unary_call
from aether.rpc.listen import ListenAddress
from aether.telemetry import client_span, current_telemetry
from aether.testing.envoy import wait_for
from aether.testing.memory_backend import MemoryBackend
from aether.testing.otlp_collector import telemetry_through_rotel
from tests.registrar._grpc import method, registration, serving_registrar, watching

SERVICE = "aether-registrar"
WAIT = 30.0


def _register_with(path: Path, ip: str, traceparent: str) -> None:
    with grpc.insecure_channel(f"unix:{path}") as channel:
        call = method(channel, "RegisterEndpoint", pb.RegisterEndpointRequest, pb.RegisterEndpointResponse)
        call(registration(ip), timeout=5, metadata=[("traceparent", traceparent)])


async def test_a_registration_is_traced_from_the_caller_to_the_fan_out(
    tmp_path: Path, short_dir: Path
) -> None:
    socket = short_dir / "registrar.sock"
    async with (
        telemetry_through_rotel(tmp_path / "rotel", service_name=SERVICE, traces=True) as sink,
        serving_registrar(MemoryBackend(), socket),
        watching(socket, node_name="n"),
        open_grpc_socket(ListenAddress.unix(socket)) as grpc_socket,
    ):
        # What the agent's `Registrations` does for each call.
        with client_span(current_telemetry().tracer, "aether.registrar.call RegisterEndpoint") as metadata:
            await unary_call(
                grpc_socket,
                service=SERVICE_NAME,
                method="RegisterEndpoint",
                request=registration("10.0.0.1"),
                response_type=pb.RegisterEndpointResponse,
                metadata=metadata,
            )
        await trio.to_thread.run_sync(_register_with, socket, "10.0.0.2", "00-not-a-traceparent-01")
        unsampled = f"00-{7:032x}-{9:016x}-00"
        await trio.to_thread.run_sync(_register_with, socket, "10.0.0.3", unsampled)

        async def exported() -> bool:
            await trio.sleep(0.05)
            names = [span.name for span in sink.spans(service=SERVICE)]
            return names.count("aether.registrar.RegisterEndpoint") >= 2

        await wait_for(exported, timeout=WAIT)
    spans = sink.spans(service=SERVICE)
    client = [span for span in spans if span.name == "aether.registrar.call RegisterEndpoint"]
    assert len(client) == 1
    assert not client[0].parent_span_id
    served = [span for span in spans if span.name == "aether.registrar.RegisterEndpoint"]
    assert len(served) == 2  # the unsampled caller's registration is left out
    child = next(span for span in served if span.parent_span_id)
    assert (child.trace_id, child.parent_span_id) == (client[0].trace_id, client[0].span_id)
    root = next(span for span in served if not span.parent_span_id)
    assert root.trace_id != child.trace_id  # the malformed traceparent: a root of its own
    assert all(span.trace_id != (7).to_bytes(16, "big") for span in spans)
    hops = {span.name: span for span in spans if span.parent_span_id == child.span_id}
    assert set(hops) == {"aether.registrar.store.write", "aether.registrar.fan_out"}
    assert child.start_time_unix_nano <= hops["aether.registrar.store.write"].start_time_unix_nano
    assert hops["aether.registrar.fan_out"].end_time_unix_nano <= child.end_time_unix_nano
    assert child.status.code != otlp.Status.STATUS_CODE_ERROR
    assert {kv.key: kv.value.string_value for kv in child.attributes}["aether.registrar.service"] == (
        registration("10.0.0.1").service_name
    )
