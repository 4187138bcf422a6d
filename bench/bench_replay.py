"""Replay and start-up: fold a 1,000,000-record log from disk; start from a checkpoint plus a 10,000-record tail.

References measured in the same run: scanning the same log without decoding or folding (frames and checksums
only), which is the floor replay stands on; the same fold with every record decoded in full (`decode_event`, the
decoder replay used before endpoint upserts were left unbuilt); and for start-up, the full replay it replaces.
Times (start-up too) are CPU seconds of this process (the machine is shared; wall seconds are printed beside them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio
from _common import churn_records, registry_state, service_names, write_results

from aether.core.events import Endpoint, EndpointsSnapshotReceived, decode_event, encode_event
from aether.core.reduce import fold_many
from aether.core.state import EMPTY_STATE, State, encode_state
from aether.log import open_event_log, scan_log, scan_log_batches
from aether.plane.collector import collector_paused
from aether.plane.replay import replay_log

SERVICES = 10_000
ENDPOINTS_PER_SERVICE = 10
TAIL = 10_000
BATCH = 10_000


def _snapshot_payload() -> bytes:
    state = registry_state(services=SERVICES, endpoints_per_service=ENDPOINTS_PER_SERVICE)
    endpoints: list[Endpoint] = [
        endpoint
        for service in sorted(state.registry.endpoints)
        for endpoint in state.registry.endpoints[service].values()
    ]
    event = EndpointsSnapshotReceived(
        observed_at=0, source="bench", version="1", endpoints=endpoints, services=service_names(SERVICES)
    )
    return encode_event(event)


async def _write_log(directory: Path, records: int, checkpoint_tail: int | None) -> None:
    """Write a snapshot record plus churn up to `records`; with `checkpoint_tail`, checkpoint that far from the end."""
    async with open_event_log(directory) as log:
        await log.append(_snapshot_payload())
        seq = 2
        checkpoint_at = None if checkpoint_tail is None else records - checkpoint_tail
        while seq <= records:
            count = min(BATCH, records - seq + 1)
            if checkpoint_at is not None and seq <= checkpoint_at:
                count = min(count, checkpoint_at - seq + 1)
            batch = churn_records(
                services=SERVICES, endpoints_per_service=ENDPOINTS_PER_SERVICE, count=count, first_seq=seq
            )
            await log.append_many([encode_event(record.event) for record in batch])
            seq += count
            if checkpoint_at is not None and seq == checkpoint_at + 1:
                state = replay_log(directory).state
                await log.write_checkpoint(seq=state.seq, payload=encode_state(state))
            if (seq - 1) % 100_000 == 0 or seq > records:
                print(f"  writing: {seq - 1:>9,} / {records:,} records", file=sys.stderr, flush=True)


def _cpu_and_wall(action: Callable[[], object]) -> tuple[float, float]:
    """Return (CPU seconds, wall seconds) of `action`."""
    cpu, wall = time.process_time(), time.perf_counter()
    action()
    return time.process_time() - cpu, time.perf_counter() - wall


def _fold_decoded_in_full(directory: Path) -> State:
    """The reference: the same scan and fold, every record decoded in full by `decode_event`."""
    with collector_paused():
        return fold_many(
            EMPTY_STATE, ((item.seq, decode_event(item.payload)) for item in scan_log(directory))
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    records = parser.parse_args().records
    with tempfile.TemporaryDirectory() as raw:
        full = Path(raw) / "full"
        trio.run(_write_log, full, records, None)
        scan_seconds, scan_wall = _cpu_and_wall(lambda: sum(1 for _ in scan_log(full)))
        batch_scan_seconds, batch_scan_wall = _cpu_and_wall(
            lambda: sum(len(batch.payloads) for batch in scan_log_batches(full))
        )
        replayed = {}
        replay_seconds, replay_wall = _cpu_and_wall(lambda: replayed.setdefault("r", replay_log(full)))
        state = replayed["r"].state
        assert state.seq == records, f"replay reached seq {state.seq}, expected {records}"
        reference = {}
        full_seconds, full_wall = _cpu_and_wall(
            lambda: reference.setdefault("r", _fold_decoded_in_full(full))
        )
        assert encode_state(reference["r"]) == encode_state(state), "the two decoders folded different states"

        tail_log = Path(raw) / "checkpointed"
        trio.run(_write_log, tail_log, SERVICES + TAIL, TAIL)
        startup = {}
        startup_seconds, startup_wall = _cpu_and_wall(lambda: startup.setdefault("r", replay_log(tail_log)))
        folded, started = startup["r"].records_folded, startup["r"].checkpoint_seq
        assert folded == TAIL, f"start-up folded {folded} records from checkpoint {started}, expected {TAIL}"
        tail_full_seconds, tail_full_wall = _cpu_and_wall(lambda: replay_log(tail_log, use_checkpoints=False))

    print(
        f"replay: {records:,} records (a {SERVICES:,} x {ENDPOINTS_PER_SERVICE} snapshot, then endpoint churn)"
    )
    print("  (CPU seconds; wall in brackets)")
    print(
        f"  scan only (frames + crc32c)   {scan_seconds:8.2f} s ({scan_wall:6.2f})  {records / scan_seconds:>10,.0f} records/s"
    )
    print(
        f"  scan only, in batches         {batch_scan_seconds:8.2f} s ({batch_scan_wall:6.2f})"
        f"  {records / batch_scan_seconds:>10,.0f} records/s   (what replay reads)"
    )
    print(
        f"  replay (decode + fold)        {replay_seconds:8.2f} s ({replay_wall:6.2f})  {records / replay_seconds:>10,.0f} records/s"
    )
    print(
        f"  reference: decoded in full    {full_seconds:8.2f} s ({full_wall:6.2f})  {records / full_seconds:>10,.0f} records/s"
    )
    print(f"  replay / scan ratio           {replay_seconds / scan_seconds:8.2f}")
    print(
        f"  reference / replay ratio      {full_seconds / replay_seconds:8.2f}   (same state: encode_state equal)"
    )
    per_million = replay_seconds * 1_000_000 / records
    print(
        f"  aim: replay of 1M <= 5 s (CPU): {'met' if per_million <= 5 else 'NOT met'} ({per_million:.2f} s per 1M)"
    )
    print(f"start-up: checkpoint ({SERVICES * ENDPOINTS_PER_SERVICE:,} endpoints) + {TAIL:,}-record tail")
    print(f"  from checkpoint + tail        {startup_seconds:8.2f} s ({startup_wall:6.2f})")
    print(
        f"  full replay of the same log   {tail_full_seconds:8.2f} s ({tail_full_wall:6.2f})"
        f"   (ratio {startup_seconds / tail_full_seconds:.2f})"
    )
    print(f"  aim: start-up <= 1 s: {'met' if startup_seconds <= 1 else 'NOT met'}")
    write_results(
        "replay",
        {
            "records": records,
            "scan_seconds": round(scan_seconds, 3),
            "batch_scan_seconds": round(batch_scan_seconds, 3),
            "replay_seconds": round(replay_seconds, 3),
            "replay_over_scan": round(replay_seconds / scan_seconds, 3),
            "replay_wall_seconds": round(replay_wall, 3),
            "full_decode_reference_seconds": round(full_seconds, 3),
            "full_decode_over_replay": round(full_seconds / replay_seconds, 3),
            "startup_seconds": round(startup_seconds, 3),
            "startup_full_replay_seconds": round(tail_full_seconds, 3),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
