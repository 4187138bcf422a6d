"""What the SotW and Delta machines share: one `StreamMachine` interface the server drives without asking which."""

from __future__ import annotations

from aether.xds.delta import DeltaStream
from aether.xds.protocol import NOTHING, StreamMachine
from aether.xds.sotw import SotwStream
from tests.xds._snapshots import snapshot

NOW = 1_000


def test_both_machines_are_stream_machines_and_name_their_mode() -> None:
    """Either variant is driven through the one interface (mypy checks the assignment); `mode` names it."""
    machines: list[StreamMachine] = [SotwStream(), DeltaStream()]
    assert [machine.mode for machine in machines] == ["sotw", "delta"]


def test_a_publish_before_any_subscription_sends_nothing_on_either_variant() -> None:
    """The shared `publish(snapshot, *, now)`: a stream that subscribed to nothing gets nothing."""
    machines: list[StreamMachine] = [SotwStream(), DeltaStream()]
    assert [machine.publish(snapshot(), now=NOW) for machine in machines] == [NOTHING, NOTHING]
