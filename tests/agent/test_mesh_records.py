"""The agent's mesh-dns record file: what the state knows, atomically, with a generation that only grows."""

from __future__ import annotations

import functools
import ipaddress
import json
from pathlib import Path

import trio

from aether.agent.mesh_records import MeshRecordsWriter, mesh_dns_records, serve_mesh_records
from aether.core.events import Event
from aether.dns import parse_records
from aether.plane.journal import open_journal
from aether.testing import fold_events
from aether.testing.builders import kube_service_deleted, kube_service_upserted, make_kube_service, make_meta


def test_records_are_the_services_with_an_ipv4_cluster_ip() -> None:
    """Every Service with an IPv4 ClusterIP, keyed `<ns>/<name>` and sorted; headless and IPv6 ones have none."""
    state = fold_events(
        kube_service_upserted(make_kube_service("reviews", namespace="shop", cluster_ip="10.96.0.20")),
        kube_service_upserted(make_kube_service("cart", namespace="shop", cluster_ip="10.96.0.10")),
        kube_service_upserted(make_kube_service("headless", cluster_ip="None")),
        kube_service_upserted(make_kube_service("six", cluster_ip="fd00::10")),
        kube_service_upserted(make_kube_service("pending", cluster_ip="")),
    )
    assert list(mesh_dns_records(state).items()) == [
        ("shop/cart", "10.96.0.10"),
        ("shop/reviews", "10.96.0.20"),
    ]


async def _files(directory: Path, path: Path, *changes: Event) -> list[dict[str, object]]:
    """Run a journal and the writer; apply `changes` one by one; return the file after start and each change."""
    seen: list[dict[str, object]] = []
    async with open_journal(directory) as journal, trio.open_nursery() as nursery:
        writer: MeshRecordsWriter = await nursery.start(
            functools.partial(serve_mesh_records, path, journal=journal, clock=lambda: 1_700_000_000.5)
        )
        seen.append(json.loads(await trio.Path(path).read_text()))
        async with journal.sender() as send:
            for change in changes:
                generation = writer.statistics().generation
                await send.send(change)
                with trio.fail_after(5):
                    await writer.wait_generation(generation + 1)
                seen.append(json.loads(await trio.Path(path).read_text()))
        nursery.cancel_scope.cancel()
    return seen


async def test_the_file_follows_the_state_and_its_generation_survives_a_restart(tmp_path: Path) -> None:
    """Written at start, rewritten on each change with generation+1; a restart with equal records keeps it."""
    path = tmp_path / "dns" / "records.json"
    meta = make_meta("reviews")
    first = await _files(
        tmp_path / "log",
        path,
        kube_service_upserted(make_kube_service("reviews", cluster_ip="10.96.0.10")),
        kube_service_deleted(meta),
        kube_service_upserted(make_kube_service("reviews", cluster_ip="10.96.0.11")),
    )
    assert first == [
        {"writtenAt": 1_700_000_000, "generation": 1, "records": {}},
        {"writtenAt": 1_700_000_000, "generation": 2, "records": {"default/reviews": "10.96.0.10"}},
        {"writtenAt": 1_700_000_000, "generation": 3, "records": {}},
        {"writtenAt": 1_700_000_000, "generation": 4, "records": {"default/reviews": "10.96.0.11"}},
    ]
    again = await _files(tmp_path / "log", path)
    assert again == [first[-1]]
    parsed = parse_records(path.read_bytes())
    assert (parsed.records.generation, dict(parsed.records.addresses), parsed.skipped) == (
        4,
        {("default", "reviews"): ipaddress.IPv4Address("10.96.0.11")},
        (),
    )
    assert sorted(item.name for item in path.parent.iterdir()) == ["records.json"]
