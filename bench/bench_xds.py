"""xDS push → ACK against real Envoy over a Unix socket, SotW and Delta, at 1,000 and 10,000 EDS clusters.

References measured in the same run: Envoy loading the same clusters from a static bootstrap (its own floor, no
xDS at all), and the Python process's CPU time during each push (the server's share of the latency: Envoy runs in
another process, so every CPU second of this one is the server's work).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
from _common import timed, write_results

from aether.core.events import Event, ResourceAcked, ResourceNacked
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, SHORT_NAMES, Resource, Snapshot
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import find_envoy_binary, open_envoy
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.sync import LatestValue
from aether.testing.envoy import static_bootstrap
from aether.testing.xds_resources import LOOPBACK, make_cluster, make_load_assignment
from aether.xds.cache import SnapshotCache
from aether.xds.protocol import StreamOutput, TypeStatus
from aether.xds.server import XdsServer

NODE = "bench"
BOTH_TYPES = (CLUSTER_TYPE, ENDPOINT_TYPE)

ENDPOINT_PORT = 20_000
# Endpoints point at 127.0.0.1 ports nobody listens on: Envoy connects only when traffic comes, and none does.

CHANGED_PORT = 40_000
# A changed endpoint moves to CHANGED_PORT + seq: a new port on every push, so its digest always differs.

PUSH_TIMEOUT = 30.0
# A push of 10,000 CLAs over SotW is ACKed in well under a second; 30 s only turns a wedged Envoy into an error.

LOAD_TIMEOUT = 90.0
# Envoy creates 10,000 clusters in a few seconds on 2 cores; 90 s covers a loaded machine.

SYNC_TIMEOUT = 5.0
# After the ACK the server's status is SYNCED at once (same task); 5 s is a margin, not an expectation.

SERVER_SHARE_AIM = 0.05
DELTA_CHANGE_AIM = 0.050


@attrs.frozen(kw_only=True)
class Sizes:
    """What one run measures: cluster counts and repeats (full, or `--quick` for a smoke run)."""

    small: int
    large: int
    added: int
    pushes: int
    loads: int


FULL = Sizes(small=1_000, large=10_000, added=1_000, pushes=9, loads=3)
QUICK = Sizes(small=100, large=1_000, added=100, pushes=2, loads=1)


@attrs.frozen(kw_only=True)
class Push:
    """One measured push: wall time to the last ACK, and the CPU the server spent meanwhile."""

    seconds: float
    cpu_seconds: float
    """Process CPU from `set_snapshot` to the last ACK: publish, serialize, frame, send, read and parse ACKs."""
    publish_seconds: float
    """Of which: the stream machines' `publish` (deciding what to send and building the response)."""
    receive_seconds: float
    """Of which: the stream machines' `receive` (Envoy's requests and ACKs)."""
    gc_seconds: float
    """The garbage collector's runs meanwhile (wall time; they fall inside the figures above)."""


class _GcClock:
    """Adds up the time the garbage collector runs, through `gc.callbacks`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


GC_CLOCK = _GcClock()


class _TimedXdsServer(XdsServer):
    """An `XdsServer` that adds up the CPU its stream machines spend on snapshots and on requests."""

    def __init__(self, cache: SnapshotCache, **options: Any) -> None:
        super().__init__(cache, **options)
        self.publish_seconds = 0.0
        self.receive_seconds = 0.0
        self.steps: LatestValue[int] = LatestValue(0)
        """How many snapshots and requests the stream machines took: set after each (`wait_synced` waits on it)."""

    def _step(self, machine: Any, item: Any) -> StreamOutput:
        start = time.thread_time()
        try:
            return super()._step(machine, item)
        finally:
            spent = time.thread_time() - start
            if isinstance(item, Snapshot):
                self.publish_seconds += spent
            else:
                self.receive_seconds += spent
            self.steps.set(self.steps.value + 1)

    def sync_states(self) -> tuple[tuple[TypeStatus, ...], ...]:
        """Each open stream's `sync_states()`: O(types), where `status()` hashes every name a Delta stream holds."""
        return tuple(machine.sync_states() for machine in self._machines.values())


@attrs.define(kw_only=True)
class ControlPlane:
    """A running ADS server on a Unix socket, with the cache to publish into and its feedback to read."""

    cache: SnapshotCache
    server: _TimedXdsServer
    feedback: trio.MemoryReceiveChannel[Event]
    socket: Path


@asynccontextmanager
async def open_control_plane(socket: Path) -> AsyncIterator[ControlPlane]:
    """Serve ADS on the Unix socket `socket`; feedback events (ACK, NACK) come out of `ControlPlane.feedback`."""
    # Unbounded: the server must never wait on the benchmark, or the wait would show up as Envoy's latency.
    send, receive = trio.open_memory_channel[Event](math.inf)
    cache = SnapshotCache()
    # perf_counter: events' observed_at is then comparable with the benchmark's own timestamps.
    server = _TimedXdsServer(cache, feedback=send, clock=time.perf_counter_ns)
    async with send, receive, trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        await nursery.start(_serve, server, ListenAddress.unix(socket))
        yield ControlPlane(cache=cache, server=server, feedback=receive, socket=socket)
        nursery.cancel_scope.cancel()


async def _serve(server: XdsServer, listen: ListenAddress, *, task_status: trio.TaskStatus[Any]) -> None:
    await serve_grpc([server.service()], listen=listen, task_status=task_status)


@attrs.frozen(kw_only=True)
class Workload:
    """Every cluster and CLA, built once; snapshots take prefixes of them."""

    clusters: tuple[Resource, ...]
    assignments: tuple[Resource, ...]

    @classmethod
    def build(cls, count: int) -> Workload:
        names = [_cluster_name(index) for index in range(count)]
        return cls(
            clusters=tuple(Resource.from_message(make_cluster(name), references=[name]) for name in names),
            assignments=tuple(
                Resource.from_message(make_load_assignment(name, [(LOOPBACK, ENDPOINT_PORT + index)]))
                for index, name in enumerate(names)
            ),
        )

    def snapshot(self, count: int, *, seq: int) -> Snapshot:
        """Return a snapshot of the first `count` EDS clusters and their CLAs."""
        built = Snapshot.build(
            node_id=NODE, seq=seq, resources=[*self.clusters[:count], *self.assignments[:count]]
        )
        assert built.consistent() == (), built.consistent()[:3]
        return built


def _cluster_name(index: int) -> str:
    return f"cluster-{index:05d}"


def moved_assignment(*, index: int, seq: int) -> Resource:
    """Return cluster `index`'s CLA with its one endpoint on the port of `seq`: a new port on every push."""
    name = _cluster_name(index)
    return Resource.from_message(make_load_assignment(name, [(LOOPBACK, CHANGED_PORT + seq)]))


def with_endpoint_moved(snapshot: Snapshot, *, index: int, seq: int) -> Snapshot:
    """Return `snapshot` with cluster `index`'s one endpoint on a new port; only that CLA is rebuilt."""
    return snapshot.with_changes(seq=seq, upserted=[moved_assignment(index=index, seq=seq)])


def _drain(feedback: trio.MemoryReceiveChannel[Event]) -> None:
    """Drop feedback left over from earlier pushes."""
    while True:
        try:
            feedback.receive_nowait()
        except trio.WouldBlock:
            return


def versions(snapshot: Snapshot, types: Sequence[str]) -> dict[str, str]:
    """Return `snapshot`'s version of each of `types`: what an ACK of it states (SotW and Delta alike)."""
    return {type_url: snapshot.version(type_url) for type_url in types}


async def receive_acks(
    plane: ControlPlane, pending: dict[str, str], *, what: str
) -> dict[str, ResourceAcked]:
    """Take feedback until each type in `pending` (type URL → version) is ACKed at that version.

    `pending` is emptied as ACKs come, so a caller whose deadline expired can tell which are missing.

    Returns:
        The ACK events, by type URL.

    Raises:
        RuntimeError: Envoy rejected a response.
    """
    acked: dict[str, ResourceAcked] = {}
    while pending:
        event = await plane.feedback.receive()
        if isinstance(event, ResourceNacked):
            raise RuntimeError(
                f"{what}: envoy rejected {SHORT_NAMES[event.type_url]}: {event.error_message!r}"
            )
        if isinstance(event, ResourceAcked) and pending.get(event.type_url) == event.version:
            del pending[event.type_url]
            acked[event.type_url] = event
    return acked


def _not_acked(plane: ControlPlane, pending: dict[str, str], *, what: str, seconds: float) -> RuntimeError:
    missing = [SHORT_NAMES[type_url] for type_url in pending]
    return RuntimeError(
        f"{what}: envoy did not ACK {missing!r} within {seconds} s (status {_status_text(plane)})"
    )


async def wait_synced(plane: ControlPlane, snapshot: Snapshot, *, types: Sequence[str], what: str) -> None:
    """Wait until the server's status shows each of `types` SYNCED at `snapshot`'s version.

    Woken by each step of a stream machine, not polled: no event marks a Delta unsubscribe, but the request that
    makes it is a step. The versions (`status()`, which hashes every name a Delta stream holds) are read only once
    `wait_settled`'s O(types) condition holds.

    Raises:
        RuntimeError: Not so within `SYNC_TIMEOUT` seconds.
    """
    expected = {type_url: snapshot.version(type_url) for type_url in types}
    with trio.move_on_after(SYNC_TIMEOUT):
        await plane.server.steps.wait_value(lambda _: _settled(plane) and _synced(plane, expected))
        return
    raise RuntimeError(f"{what}: status not SYNCED within {SYNC_TIMEOUT} s (status {_status_text(plane)})")


async def wait_settled(plane: ControlPlane, *, what: str) -> None:
    """Wait until the one stream has nothing in flight and nothing rejected (`sync_states()`, O(types)).

    After a push whose ACKs came at the snapshot's versions this is what `wait_synced` checks; its versions are
    those of the ACK events.

    Raises:
        RuntimeError: Not so within `SYNC_TIMEOUT` seconds.
    """
    with trio.move_on_after(SYNC_TIMEOUT):
        await plane.server.steps.wait_value(lambda _: _settled(plane))
        return
    raise RuntimeError(f"{what}: still in flight after {SYNC_TIMEOUT} s (status {_status_text(plane)})")


_UNSETTLED = frozenset({TypeStatus.STALE, TypeStatus.NACKED})


def _settled(plane: ControlPlane) -> bool:
    streams = plane.server.sync_states()
    return len(streams) == 1 and _UNSETTLED.isdisjoint(streams[0])


def _synced(plane: ControlPlane, expected: dict[str, str]) -> bool:
    streams = plane.server.status()
    if len(streams) != 1:
        return False
    rows = {row.type_url: row for row in streams[0].types}
    return all(
        type_url in rows
        and rows[type_url].status is TypeStatus.SYNCED
        and rows[type_url].acked_version == version
        for type_url, version in expected.items()
    )


def _status_text(plane: ControlPlane) -> str:
    return "; ".join(
        ", ".join(f"{row.short_type} {row.status.value}" for row in stream.types)
        for stream in plane.server.status()
    )


async def push(plane: ControlPlane, snapshot: Snapshot, *, types: Sequence[str], what: str) -> Push:
    """Publish `snapshot` and time it until the ACK of each of `types` leaves the feedback channel."""
    pending = versions(snapshot, types)
    _drain(plane.feedback)
    server = plane.server
    publish_before, receive_before = server.publish_seconds, server.receive_seconds
    gc_before = GC_CLOCK.seconds
    cpu_before = time.process_time()
    start = time.perf_counter()
    plane.cache.set_snapshot(snapshot)
    with trio.move_on_after(PUSH_TIMEOUT) as scope:
        await receive_acks(plane, pending, what=what)
    if scope.cancelled_caught:
        raise _not_acked(plane, pending, what=what, seconds=PUSH_TIMEOUT)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_before
    measured = Push(
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        publish_seconds=server.publish_seconds - publish_before,
        receive_seconds=server.receive_seconds - receive_before,
        gc_seconds=GC_CLOCK.seconds - gc_before,
    )
    await wait_settled(plane, what=what)
    return measured


async def settle(plane: ControlPlane, snapshot: Snapshot, *, what: str) -> None:
    """Publish `snapshot` and wait until Envoy holds it (unmeasured: resets between measured pushes)."""
    plane.cache.set_snapshot(snapshot)
    await wait_synced(plane, snapshot, types=BOTH_TYPES, what=what)


@attrs.frozen(kw_only=True)
class Load:
    """Envoy start → every cluster and CLA ACKed over ADS."""

    seconds: float
    cpu_seconds: float
    publish_seconds: float


@asynccontextmanager
async def open_loaded_envoy(
    snapshot: Snapshot, *, mode: str, work_dir: Path, loads: list[Load]
) -> AsyncIterator[ControlPlane]:
    """Start a control plane holding `snapshot` and an Envoy on it; time the initial load into `loads`."""
    async with open_control_plane(work_dir / "xds.sock") as plane:
        plane.cache.set_snapshot(snapshot)
        bootstrap = ads_bootstrap(node_id=NODE, xds_unix_socket=plane.socket, delta=mode == "delta")
        pending = versions(snapshot, BOTH_TYPES)
        cpu_before, publish_before = time.process_time(), plane.server.publish_seconds
        start = time.perf_counter_ns()
        async with open_envoy(bootstrap, work_dir=work_dir / "envoy", wait_live=False):
            what = f"{mode}: initial load of {len(snapshot.of_type(CLUSTER_TYPE)):,} clusters"
            with trio.move_on_after(LOAD_TIMEOUT) as scope:
                acked = await receive_acks(plane, pending, what=what)
            if scope.cancelled_caught:
                raise _not_acked(plane, pending, what=what, seconds=LOAD_TIMEOUT)
            # The ACKs may have waited in the channel while open_envoy polled the admin API: use when the
            # server read them (observed_at, on the perf_counter clock).
            finished = max(event.observed_at for event in acked.values())
            loads.append(
                Load(
                    seconds=(finished - start) / 1e9,
                    cpu_seconds=time.process_time() - cpu_before,
                    publish_seconds=plane.server.publish_seconds - publish_before,
                )
            )
            await wait_synced(plane, snapshot, types=BOTH_TYPES, what=what)
            yield plane


async def measure_mode(mode: str, workload: Workload, sizes: Sizes, work_dir: Path) -> dict[str, Any]:
    """Measure one xDS mode: one-endpoint pushes at both sizes, adding clusters, and the initial load."""
    small_loads: list[Load] = []
    changes_small: list[Push] = []
    adds: list[Push] = []
    base = workload.snapshot(sizes.small, seq=1)
    grown = workload.snapshot(sizes.small + sizes.added, seq=2)
    async with open_loaded_envoy(
        base, mode=mode, work_dir=work_dir / f"{mode}-small", loads=small_loads
    ) as plane:
        current, seq = base, 2
        for step in range(sizes.pushes):
            seq += 1
            current = with_endpoint_moved(current, index=step * 997 % sizes.small, seq=seq)
            what = f"{mode}: endpoint change at {sizes.small:,}"
            changes_small.append(await push(plane, current, types=(ENDPOINT_TYPE,), what=what))
        for _ in range(sizes.pushes):
            await settle(plane, base, what=f"{mode}: back to {sizes.small:,} clusters")
            what = f"{mode}: add {sizes.added:,} clusters"
            adds.append(await push(plane, grown, types=BOTH_TYPES, what=what))
        print(f"  {mode}: {sizes.small:,} clusters done", file=sys.stderr, flush=True)

    large_loads: list[Load] = []
    changes_large: list[Push] = []
    snapshot = workload.snapshot(sizes.large, seq=1)
    for attempt in range(sizes.loads):
        directory = work_dir / f"{mode}-large-{attempt}"
        async with open_loaded_envoy(snapshot, mode=mode, work_dir=directory, loads=large_loads) as plane:
            print(f"  {mode}: {sizes.large:,} clusters loaded", file=sys.stderr, flush=True)
            if attempt == sizes.loads - 1:
                current, seq = snapshot, 1
                for step in range(sizes.pushes):
                    seq += 1
                    current = with_endpoint_moved(current, index=step * 7919 % sizes.large, seq=seq)
                    what = f"{mode}: endpoint change at {sizes.large:,}"
                    changes_large.append(await push(plane, current, types=(ENDPOINT_TYPE,), what=what))
    return {
        "change_small": changes_small,
        "change_large": changes_large,
        "add": adds,
        "load_small": small_loads,
        "load_large": large_loads,
    }


async def static_load(clusters: Sequence[Any], *, work_dir: Path) -> float:
    """Return Envoy start → `/ready` LIVE with `clusters` in its static bootstrap (JSON encoding excluded)."""
    bootstrap = static_bootstrap(clusters=clusters)
    # open_envoy encodes the bootstrap in this process before it starts Envoy: measure that and take it off.
    encoding = timed(lambda: json.dumps(bootstrap, indent=2))
    start = time.perf_counter()
    async with open_envoy(bootstrap, work_dir=work_dir):
        seconds = time.perf_counter() - start
    return seconds - encoding


async def measure_static(sizes: Sizes, work_dir: Path) -> dict[int, list[float]]:
    """Time Envoy loading 0, small and large counts of STATIC clusters with inline endpoints."""
    loads: dict[int, list[float]] = {}
    for count in (0, sizes.small, sizes.large):
        clusters = [
            make_cluster(_cluster_name(index), eds=False, endpoints=[(LOOPBACK, ENDPOINT_PORT + index)])
            for index in range(count)
        ]
        loads[count] = [
            await static_load(clusters, work_dir=work_dir / f"static-{count}-{attempt}")
            for attempt in range(sizes.loads)
        ]
        print(f"  static: {count:,} clusters done", file=sys.stderr, flush=True)
    return loads


async def run(sizes: Sizes) -> tuple[dict[str, dict[str, Any]], dict[int, list[float]]]:
    workload = Workload.build(sizes.large)
    with tempfile.TemporaryDirectory(prefix="bench-xds-") as name:
        work_dir = Path(name)
        static = await measure_static(sizes, work_dir)
        modes = {mode: await measure_mode(mode, workload, sizes, work_dir) for mode in ("sotw", "delta")}
    return modes, static


def _ms(seconds: float) -> float:
    return seconds * 1000


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _summary(pushes: Sequence[Push]) -> dict[str, float]:
    return {
        "median_ms": round(_ms(_median([one.seconds for one in pushes])), 2),
        "max_ms": round(_ms(max(one.seconds for one in pushes)), 2),
        "server_cpu_median_ms": round(_ms(_median([one.cpu_seconds for one in pushes])), 3),
        "publish_median_ms": round(_ms(_median([one.publish_seconds for one in pushes])), 3),
        "receive_median_ms": round(_ms(_median([one.receive_seconds for one in pushes])), 3),
        "gc_median_ms": round(_ms(_median([one.gc_seconds for one in pushes])), 3),
        "gc_max_ms": round(_ms(max(one.gc_seconds for one in pushes)), 3),
        "server_share": round(
            _median([one.cpu_seconds for one in pushes]) / _median([one.seconds for one in pushes]), 4
        ),
    }


def envoy_version() -> str:
    result = subprocess.run(
        [str(find_envoy_binary()), "--version"], capture_output=True, text=True, check=False, timeout=30
    )
    for word in result.stdout.split():
        if word.count("/") >= 2 and word[0].isalnum():
            return word.split("/")[1]  # "<sha>/1.40.0/Clean/RELEASE/BoringSSL"
    return "unknown"


def _rows(sizes: Sizes) -> dict[str, str]:
    """Return the push rows of the table: key in the results, and label."""
    return {
        "change_small": f"1 endpoint change, {sizes.small:,} clusters",
        "change_large": f"1 endpoint change, {sizes.large:,} clusters",
        "add": f"add {sizes.added:,} clusters to {sizes.small:,}",
    }


def report_mode(
    mode: str, measured: dict[str, Any], *, sizes: Sizes, static_median: dict[int, float]
) -> dict[str, Any]:
    """Print one mode's table and ratios; return its figures."""
    small, added = f"{sizes.small:,}", f"{sizes.added:,}"
    print(f"{mode}:")
    print(
        f"  {'':36}{'push→ACK ms':>18}{'server CPU ms':>15}{'publish ms':>12}{'ACK read ms':>12}"
        f"{'GC ms':>14}{'CPU share':>11}"
    )
    figures: dict[str, Any] = {}
    for key, label in _rows(sizes).items():
        summary = _summary(measured[key])
        figures[key] = summary
        print(
            f"  {label:<36}{summary['median_ms']:>9.1f} / {summary['max_ms']:<7.1f}"
            f"{summary['server_cpu_median_ms']:>14.2f}{summary['publish_median_ms']:>12.2f}"
            f"{summary['receive_median_ms']:>12.2f}"
            f"{summary['gc_median_ms']:>7.1f} / {summary['gc_max_ms']:<5.1f}{summary['server_share']:>10.1%}"
        )
    add_median = figures["add"]["median_ms"] / 1000
    cluster_floor = static_median[sizes.small] - static_median[0]
    creation_ratio = f"{add_median / cluster_floor:.2f}" if cluster_floor > 0 else "n/a (within noise)"
    print(
        f"  add {added} push→ACK / static load of {small}: {add_median / static_median[sizes.small]:.2f}"
        f"  (/ static cluster creation only, an empty Envoy's start-up taken off: {creation_ratio})"
    )
    figures["add_over_static"] = round(add_median / static_median[sizes.small], 3)
    for key, count in (("load_small", sizes.small), ("load_large", sizes.large)):
        loads: list[Load] = measured[key]
        seconds = _median([one.seconds for one in loads])
        cpu = _median([one.cpu_seconds for one in loads])
        publish = _median([one.publish_seconds for one in loads])
        ratio = seconds / static_median[count]
        print(
            f"  initial load of {count:,} over ADS (start → CDS+EDS ACKed) {_ms(seconds):8.1f} ms;"
            f" static {_ms(static_median[count]):.1f} ms; ratio {ratio:.2f};"
            f" server CPU {_ms(cpu):.1f} ms (publish {_ms(publish):.1f} ms)"
        )
        figures[key] = {
            "median_ms": round(_ms(seconds), 1),
            "ratio_to_static": round(ratio, 3),
            "server_cpu_median_ms": round(_ms(cpu), 2),
            "publish_median_ms": round(_ms(publish), 2),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")
    sizes = QUICK if parser.parse_args().quick else FULL
    gc.callbacks.append(GC_CLOCK)
    try:
        modes, static = trio.run(run, sizes)
    finally:
        gc.callbacks.remove(GC_CLOCK)

    static_median = {count: _median(values) for count, values in static.items()}
    print(
        f"xds: Envoy {envoy_version()} over a Unix socket; push → ACK median / max of {sizes.pushes}, "
        f"loads median of {sizes.loads}"
    )
    print("  server CPU = this process's CPU from set_snapshot to the ACK (Envoy is another process);")
    print(
        "  publish and ACK read = the stream machines' part of it; GC = collector runs inside it, median / max"
    )
    print(f"  static floor: Envoy start → /ready LIVE with N STATIC clusters (median of {sizes.loads})")
    for count, seconds in static_median.items():
        print(f"    {count:>6,} clusters  {_ms(seconds):8.1f} ms")
    figures: dict[str, Any] = {
        "sizes": attrs.asdict(sizes),
        "static_load_ms": {str(count): round(_ms(seconds), 1) for count, seconds in static_median.items()},
    }
    for mode, measured in modes.items():
        figures[mode] = report_mode(mode, measured, sizes=sizes, static_median=static_median)

    worst_share, worst_row = max(
        (figures[mode][key]["server_share"], f"{mode}, {label}")
        for mode in modes
        for key, label in _rows(sizes).items()
    )
    print(
        f"aim: server-side work <= {SERVER_SHARE_AIM:.0%} of push→ACK: "
        f"{'met' if worst_share <= SERVER_SHARE_AIM else 'NOT met'} (worst {worst_share:.1%}: {worst_row})"
    )
    changes = [one.seconds for one in modes["delta"]["change_large"]]
    delta_change = _median(changes)
    over = sum(1 for seconds in changes if seconds > DELTA_CHANGE_AIM)
    print(
        f"aim: one endpoint change at {sizes.large:,} clusters ACKed in <= {_ms(DELTA_CHANGE_AIM):.0f} ms over "
        f"Delta: {'met' if delta_change <= DELTA_CHANGE_AIM else 'NOT met'} "
        f"(median {_ms(delta_change):.1f} ms; {over} of {len(changes)} pushes over)"
    )
    write_results("xds" if sizes == FULL else "xds_quick", figures)


if __name__ == "__main__":
    sys.exit(main())
