"""The wire between the host executable and the agent (`aether.cni.wire`): frames round-trip, bad ones are named."""

from __future__ import annotations

import pytest

from aether.cni.wire import MAGIC, MAX_STDIN, PluginRequest, PluginResponse, WireError


def test_a_request_round_trips_with_only_its_cni_variables() -> None:
    """Encoding keeps the CNI_* variables (sorted) and stdin; what is not CNI_* never goes on the wire."""
    request = PluginRequest(
        environ={"CNI_COMMAND": "ADD", "PATH": "/bin", "CNI_ARGS": "A=1;B=="}, stdin=b"{}"
    )
    frame = request.to_bytes()
    assert frame == MAGIC + b"\0\0\0\x21CNI_ARGS=A=1;B==\0CNI_COMMAND=ADD\0" + b"\0\0\0\x02{}"
    assert PluginRequest.expected_length(frame[:12]) is None
    assert PluginRequest.expected_length(frame) == len(frame)
    assert PluginRequest.from_bytes(frame) == PluginRequest(
        environ={"CNI_ARGS": "A=1;B==", "CNI_COMMAND": "ADD"}, stdin=b"{}"
    )


def test_a_response_round_trips() -> None:
    """Status, stdout and stderr come back as sent."""
    response = PluginResponse(status=1, stdout=b'{"code": 11}\n', stderr=b"warning\n")
    assert PluginResponse.from_bytes(response.to_bytes()) == response


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"GET / HTTP/1.1\r\n", "a request must start with b'AECNI\\x01' (got b'GET / ')"),
        (MAGIC + b"\0\0\0\x05CNI_", "the environment is cut short (4 of 5 bytes)"),
        (
            MAGIC + b"\0\0\0\x07PATH=1\0" + b"\0\0\0\0",
            "each environment entry must be CNI_NAME=value (got b'PATH=1')",
        ),
        (MAGIC + b"\0\0\0\x00" + b"\0\0\0\x01{}", "1 bytes follow the request"),
        (
            MAGIC + b"\0\0\0\x00" + (MAX_STDIN + 1).to_bytes(4, "big"),
            f"stdin must be at most {MAX_STDIN} bytes (got {MAX_STDIN + 1})",
        ),
    ],
)
def test_a_bad_request_is_refused_with_its_reason(frame: bytes, reason: str) -> None:
    """Wrong magic, a block cut short, a variable that is not CNI_*, trailing bytes, a block too long."""
    with pytest.raises(WireError) as caught:
        PluginRequest.from_bytes(frame)
    assert caught.value.reason == reason
