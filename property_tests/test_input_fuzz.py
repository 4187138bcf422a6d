"""Fuzz targets of the adapters' input checks: any manifest text, CNI invocation or registrar request gives a
result or the documented refusal, never another exception; what is accepted can always be written to the log."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aether.cni.config import Invocation, NetworkConfig
from aether.cni.errors import CniError
from aether.core.events import EndpointAdded, encode_event
from aether.core.validation import ip_problem
from aether.kube.manifests import ManifestDirectory, ManifestError
from aether.proto.registrar.v1 import registrar_pb2
from aether.proto.registry.v1 import registry_pb2
from aether.registrar.convert import registration_from_proto, unregistration_from_proto
from aether.registrar.errors import InvalidRequestError
from property_tests.input_strategies import (
    cni_environments,
    cni_stdins,
    ip_texts,
    manifest_texts,
    registrations,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

T = TypeVar("T")
E = TypeVar("E", bound=Exception)


def outcome(function: Callable[[], T], refusal: type[E]) -> T | E:
    """Return what `function` returns, or the `refusal` it raises (any other exception fails the property)."""
    try:
        return function()
    except refusal as error:
        return error


@FUZZ
@given(texts=st.lists(manifest_texts, min_size=1, max_size=3))
@example(
    texts=["apiVersion: v1\nkind: Service\nmetadata: {name: a, generation: 1000000000000000000000000000}\n"]
)
def test_any_manifest_text_reads_or_is_refused_and_every_event_it_gives_encodes(texts: list[str]) -> None:
    """Bytes, YAML punctuation, anchors, deep nesting and integers of any size: `ManifestError`, or a reading
    whose events the log can hold."""
    files = {f"f{index}.yaml": text for index, text in enumerate(texts)}
    reading = outcome(lambda: ManifestDirectory.parse(files), ManifestError)
    if isinstance(reading, ManifestError):
        assert str(reading).startswith("manifest f")
        return
    for event in reading.events(source="directory", observed_at=1):
        encode_event(event)
    assert all(str(problem) for problem in reading.problems)


@FUZZ
@given(stdin=cni_stdins, environ=cni_environments)
@example(stdin=b"[" * 100_000, environ={"CNI_COMMAND": "ADD", "CNI_NETNS": "/" + "n" * 300})
def test_any_cni_invocation_reads_or_is_refused_with_the_specs_error_object(
    stdin: bytes, environ: dict[str, str]
) -> None:
    """The network config and the CNI_* environment parse or raise a `CniError` (whose error object is JSON with
    a spec or plugin code and a message); reading the version for that error object never raises."""
    assert NetworkConfig.version_of(stdin)
    config = outcome(lambda: NetworkConfig.from_json(stdin), CniError)
    invocation = outcome(lambda: Invocation.from_environ(environ), CniError)
    for error in (item for item in (config, invocation) if isinstance(item, CniError)):
        document = json.loads(error.to_json(cni_version="1.1.0"))
        assert document["code"] in (1, 4, 6, 7)
        assert document["msg"]
    if isinstance(config, NetworkConfig):
        assert [ip for ip in config.pod_ips if ip_problem(ip, what="ip")] == []
        json.dumps(config.prev_result)


ZONED = registrar_pb2.RegisterEndpointRequest(
    service_name="shop/web",
    protocol=registry_pb2.Service.PROTOCOL_HTTP,
    endpoint=registry_pb2.ServiceEndpoint(ip="fe80::1%eth0", port=8080),
)


@FUZZ
@given(request=registrations())
@example(request=ZONED)
def test_a_registration_is_refused_with_the_field_or_gives_an_endpoint_the_log_can_hold(
    request: registrar_pb2.RegisterEndpointRequest,
) -> None:
    """Any RegisterEndpoint request: `InvalidRequestError` naming a field, or an endpoint without a zone whose
    registry event encodes."""
    mutation = outcome(lambda: registration_from_proto(request), InvalidRequestError)
    if isinstance(mutation, InvalidRequestError):
        assert str(mutation).startswith(f"{mutation.field}: ")
        return
    endpoint = mutation.endpoint
    assert "%" not in endpoint.ip
    assert ip_problem(endpoint.ip, what="ip") is None
    encode_event(EndpointAdded(observed_at=1, source="registrar", version="1", endpoint=endpoint))


@FUZZ
@given(payload=st.binary(max_size=64), ips=st.lists(ip_texts, max_size=3))
@example(payload=ZONED.SerializeToString(), ips=["fe80::1%1"])
def test_any_request_bytes_parse_or_fail_to_parse_and_unregistrations_validate(
    payload: bytes, ips: list[str]
) -> None:
    """Request bytes from the wire either parse (then validate or are refused) or raise the protobuf's
    `DecodeError`, which the server answers with INVALID_ARGUMENT; an accepted unregistration has no zoned IP."""
    register = outcome(lambda: registrar_pb2.RegisterEndpointRequest.FromString(payload), DecodeError)
    if isinstance(register, Message):
        outcome(lambda: registration_from_proto(register), InvalidRequestError)
    unregister = outcome(lambda: registrar_pb2.UnregisterEndpointRequest.FromString(payload), DecodeError)
    if isinstance(unregister, Message):
        outcome(lambda: unregistration_from_proto(unregister), InvalidRequestError)
    request = registrar_pb2.UnregisterEndpointRequest(service_name="shop/web", ips=ips)
    mutation = outcome(lambda: unregistration_from_proto(request), InvalidRequestError)
    if not isinstance(mutation, InvalidRequestError):
        assert [ip for ip in mutation.ips if "%" in ip] == []
