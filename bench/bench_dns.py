"""Benchmark `aether mesh-dns` over 1,000 mesh names and 1,000 forwarded names, against unbound in the same run.

One single-process blocking UDP client sends N queries with up to `--window` outstanding, to each server in
turn (each server in its own process): a bare trio UDP echo server (the ceiling for any trio UDP loop),
`serve_mesh_dns` with the 1,000 mesh names, and unbound with the same names as local-data when it is installed.
Everything is on loopback.

Then, when Debian's `dnsperf` and `unbound` are installed, the figures that matter, all from one run: `dnsperf`
queries/s against mesh-dns and against unbound (the same 1,000 records as unbound's local-data), for mesh names
and for forwarded names (mesh-dns forwards those to that same unbound, which answers them from local-data too),
and the ratios mesh-dns / unbound; and each server's CPU per query, with the ratio of those (unbound's / mesh-dns's:
the rate ratio each would reach on a core of its own, which the machine's load moves far less). Forwarded names carry a 5 s TTL, so mesh-dns's cache refetches every name every
5 s while dnsperf runs (real external names mostly have 30 s to a day); a third set of 1,000 forwarded names has
TTL 0, which no cache may keep, so every one of those queries goes upstream: that figure is the forwarding path
itself. The figures are written to bench/results/dns.json.

    python bench/bench_dns.py [--queries 50000] [--window 1] [--dnsperf-seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dnslib
from _common import write_results

NAME_COUNT = 1_000
"""Distinct names per set: a node's pods ask for hundreds of names, not two."""
NAMESPACES = 50
MESH_RECORDS = {
    f"ns{index % NAMESPACES}/svc{index}": f"10.96.{index // 250}.{index % 250 + 1}"
    for index in range(NAME_COUNT)
}
"""The record file's entries: `<namespace>/<service>` to a virtual IP."""
NAMES = tuple(f"{key.split('/')[1]}.{key.split('/')[0]}.aether.internal" for key in MESH_RECORDS)
FORWARDED = tuple(f"host{index}.zone{index % NAMESPACES}.example.test" for index in range(NAME_COUNT))
"""Names outside the mesh domain: mesh-dns forwards them (to unbound, in the dnsperf comparison)."""
FORWARDED_TTL = 5
"""TTL unbound gives `FORWARDED`: short, so the forwarded-answer cache expires and refetches during each run."""
UNCACHEABLE = tuple(f"ttl0-host{index}.example.test" for index in range(NAME_COUNT))
"""Forwarded names with TTL 0 (RFC 1035 3.2.1: use once, cache never): every query of these goes upstream."""

_ECHO_SERVER = """
import sys, trio
async def main():
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    while True:
        data, peer = await sock.recvfrom(65535)
        await sock.sendto(data, peer)
trio.run(main)
"""

_MESH_DNS_SERVER = """
import sys, trio
from pathlib import Path
from aether.dns import HostPort, serve_mesh_dns
async def main():
    async with trio.open_nursery() as nursery:
        server = await nursery.start(lambda task_status: serve_mesh_dns(
            listen=HostPort(host="127.0.0.1", port=0), records_path=Path(sys.argv[1]),
            upstreams=tuple(HostPort(host="127.0.0.1", port=int(port)) for port in sys.argv[2:]),
            mesh_domain="aether.internal", task_status=task_status))
        with trio.fail_after(10):
            await server.wait_generation(1)
        print(server.address.port, flush=True)
trio.run(main)
"""


def _queries() -> list[bytes]:
    return [bytes(dnslib.DNSRecord.question(name, "A").pack()) for name in NAMES]


def _case_variants(count: int) -> list[bytes]:
    """`count` spellings of the mesh names differing in letter case: each is a cache miss (a full parse)."""
    variants = []
    for index in range(count):
        name = NAMES[index % len(NAMES)]
        spelled = "".join(
            char.upper() if (index >> (position % 20)) & 1 else char for position, char in enumerate(name)
        )
        variants.append(bytes(dnslib.DNSRecord.question(spelled, "A").pack()))
    return variants


def run_client(
    port: int, *, queries: int, window: int, check: bool, templates: list[bytes] | None = None
) -> float:
    """Send `queries` queries (cycling `templates`, fresh IDs) with `window` outstanding; return queries/s."""
    templates = templates or _queries()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("127.0.0.1", port))
        sock.settimeout(2.0)
        # Warm up: one answer, so the server is known to be up (the cache fills during the run, as in life).
        for template in templates[:1]:
            sock.send(template)
            reply = sock.recv(4096)
            if check:
                assert dnslib.DNSRecord.parse(reply).rr, f"no answer from port {port}: {reply!r}"
        sent = received = 0
        started = time.perf_counter()
        while received < queries:
            while sent < queries and sent - received < window:
                template = templates[sent % len(templates)]
                sock.send((sent & 0xFFFF).to_bytes(2, "big") + template[2:])
                sent += 1
            try:
                sock.recv(4096)
            except TimeoutError:
                sent = received  # a lost datagram: resend the rest of the window
                continue
            received += 1
        return queries / (time.perf_counter() - started)


def _start(arguments: list[str]) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(arguments, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise RuntimeError(f"{arguments[:3]!r} did not start")
    return process, int(line)


def _unbound(directory: Path) -> tuple[subprocess.Popen[str], int] | None:
    binary = shutil.which("unbound")
    if binary is None:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = directory / "unbound.conf"
    local = "".join(
        f'    local-data: "{name}. 5 IN A {address}"\n'
        for name, address in zip(NAMES, MESH_RECORDS.values(), strict=True)
    )
    local += "".join(
        f'    local-data: "{name}. {FORWARDED_TTL} IN A 198.18.{index // 250}.{index % 250 + 1}"\n'
        for index, name in enumerate(FORWARDED)
    )
    local += "".join(
        f'    local-data: "{name}. 0 IN A 198.19.{index // 250}.{index % 250 + 1}"\n'
        for index, name in enumerate(UNCACHEABLE)
    )
    config.write_text(
        f"server:\n    interface: 127.0.0.1\n    port: {port}\n    num-threads: 1\n    do-daemonize: no\n"
        f'    use-syslog: no\n    username: ""\n    chroot: ""\n    directory: "{directory}"\n    pidfile: ""\n'
        f'    local-zone: "aether.internal." static\n    local-zone: "example.test." static\n{local}'
    )
    process = subprocess.Popen([binary, "-d", "-c", str(config)], text=True)
    for _ in range(50):
        try:
            run_client(port, queries=1, window=1, check=True)
            return process, port
        except (OSError, AssertionError):
            time.sleep(0.1)
    process.kill()
    return None


def dnsperf(port: int, names: tuple[str, ...], *, seconds: int, directory: Path) -> float:
    """Run `dnsperf` (4 clients, UDP) against 127.0.0.1:`port` for `seconds`, cycling `names`; return queries/s."""
    data = directory / f"queries-{port}-{len(names)}-{names[0]}.txt"
    data.write_text("".join(f"{name} A\n" for name in names))
    binary = shutil.which("dnsperf")
    assert binary is not None
    done = subprocess.run(
        [binary, "-s", "127.0.0.1", "-p", str(port), "-d", str(data), "-c", "4", "-l", str(seconds)],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"Queries per second:\s+([0-9.]+)", done.stdout)
    lost = re.search(r"Queries lost:\s+(\d+)", done.stdout)
    if match is None:
        raise RuntimeError(f"dnsperf printed no rate: {done.stdout[-500:]!r}")
    if lost is not None and int(lost.group(1)) > 0:
        print(f"dnsperf on port {port}: {lost.group(1)} queries lost", file=sys.stderr)
    return float(match.group(1))


KINDS = {"mesh_names": NAMES, "forwarded_names": FORWARDED, "forwarded_ttl0_names": UNCACHEABLE}
"""The dnsperf query sets, each run against unbound and then mesh-dns."""


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU seconds process `pid` has used so far (Linux /proc; zeros elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def compare_with_unbound(records: Path, directory: Path, *, seconds: int) -> dict[str, float] | None:
    """mesh-dns vs unbound with dnsperf, in one run: mesh names, and forwarded names (upstream: that unbound).

    Besides queries/s, each server's CPU per query (user and system microseconds, from /proc) during its run:
    on a shared machine the rate moves with the load, the CPU a query costs much less, and it shows what bounds
    the rate (for forwarded names, mesh-dns's figure leaves out the upstream unbound's share).
    """
    if shutil.which("dnsperf") is None:
        print("dnsperf: not installed (Debian dnsperf), comparison skipped", file=sys.stderr)
        return None
    unbound = _unbound(directory)
    if unbound is None:
        print("unbound: not installed (Debian unbound), comparison skipped", file=sys.stderr)
        return None
    unbound_process, unbound_port = unbound
    figures: dict[str, float] = {}
    try:
        mesh_process, mesh_port = _start(
            [sys.executable, "-c", _MESH_DNS_SERVER, str(records), str(unbound_port)]
        )
        try:
            for kind, names in KINDS.items():
                for server, process, port in (
                    ("unbound", unbound_process, unbound_port),
                    ("mesh_dns", mesh_process, mesh_port),
                ):
                    user, system = _cpu_seconds(process.pid)
                    qps = dnsperf(port, names, seconds=seconds, directory=directory)
                    user_after, system_after = _cpu_seconds(process.pid)
                    answered = qps * seconds
                    figures[f"{server}_{kind}"] = round(qps)
                    figures[f"{server}_{kind}_user_us"] = round(1e6 * (user_after - user) / answered, 2)
                    figures[f"{server}_{kind}_system_us"] = round(1e6 * (system_after - system) / answered, 2)
                figures[f"ratio_{kind}"] = round(figures[f"mesh_dns_{kind}"] / figures[f"unbound_{kind}"], 3)
                cpu = {
                    server: figures[f"{server}_{kind}_user_us"] + figures[f"{server}_{kind}_system_us"]
                    for server in ("unbound", "mesh_dns")
                }
                # Queries/s each server could answer on a core of its own: the same ratio, less the load's noise.
                figures[f"cpu_ratio_{kind}"] = (
                    round(cpu["unbound"] / cpu["mesh_dns"], 3) if cpu["mesh_dns"] else 0.0
                )
        finally:
            mesh_process.kill()
            mesh_process.wait()
    finally:
        unbound_process.kill()
        unbound_process.wait()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--window", type=int, default=1, help="queries outstanding at once (1 = ping-pong)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--dnsperf-seconds", type=int, default=5, help="length of each dnsperf run")
    arguments = parser.parse_args()
    results: dict[str, float] = {}
    comparison: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as directory:
        records = Path(directory) / "records.json"
        records.write_text(
            json.dumps(
                {
                    "writtenAt": "bench",
                    "generation": 1,
                    "records": MESH_RECORDS,
                }
            )
        )
        servers: dict[str, Callable[[], tuple[subprocess.Popen[str], int] | None]] = {
            "trio UDP echo (reference)": lambda: _start([sys.executable, "-c", _ECHO_SERVER]),
            "aether mesh-dns (cached answers)": lambda: _start(
                [sys.executable, "-c", _MESH_DNS_SERVER, str(records)]
            ),
            "aether mesh-dns (uncached: case varies)": lambda: _start(
                [sys.executable, "-c", _MESH_DNS_SERVER, str(records)]
            ),
            "unbound (local-data, 1 thread)": lambda: _unbound(Path(directory)),
        }
        for label, start in servers.items():
            started = start()
            if started is None:
                print(f"{label}: not installed, skipped", file=sys.stderr)
                continue
            process, port = started
            try:
                results[label] = run_client(
                    port,
                    queries=arguments.queries,
                    window=arguments.window,
                    check="echo" not in label,
                    # Distinct spellings: 2**20 > any --queries we use, so no spelling repeats in a run.
                    templates=_case_variants(arguments.queries) if "uncached" in label else None,
                )
            finally:
                process.kill()
                process.wait()
        comparison = compare_with_unbound(records, Path(directory), seconds=arguments.dnsperf_seconds)
    reference = results["trio UDP echo (reference)"]
    write_results(
        "dns",
        {
            "queries": arguments.queries,
            "window": arguments.window,
            "names": NAME_COUNT,
            "forwarded_ttl": FORWARDED_TTL,
            "qps": {label: round(qps) for label, qps in results.items()},
            "dnsperf": comparison,
        },
    )
    if arguments.json:
        print(
            json.dumps(
                {
                    "queries": arguments.queries,
                    "window": arguments.window,
                    "qps": results,
                    "dnsperf": comparison,
                }
            )
        )
        return
    print(f"{arguments.queries} queries, window {arguments.window}, loopback, one client process")
    print(f"{'server':<36} {'queries/s':>10} {'vs echo':>8}")
    for label, qps in results.items():
        print(f"{label:<36} {qps:>10,.0f} {qps / reference:>8.2f}")
    if comparison is not None:
        print(
            f"dnsperf -c 4 -l {arguments.dnsperf_seconds}, loopback (queries/s; mesh-dns forwards to the same unbound)"
        )
        print(
            f"{NAME_COUNT} names per set, forwarded TTL {FORWARDED_TTL} s (ttl0: every query goes upstream)"
        )
        print(
            f"{'names':<16} {'mesh-dns':>10} {'unbound':>10} {'ratio':>7}"
            "   CPU us/query, user+sys: mesh-dns | unbound (CPU ratio: unbound's / mesh-dns's)"
        )
        for kind in KINDS:
            mesh, reference_qps = comparison[f"mesh_dns_{kind}"], comparison[f"unbound_{kind}"]
            label = kind.removesuffix("_names").replace("_", " ")
            cpu = " | ".join(
                f"{comparison[f'{server}_{kind}_user_us']:.1f}+{comparison[f'{server}_{kind}_system_us']:.1f}"
                for server in ("mesh_dns", "unbound")
            )
            ratio = comparison[f"ratio_{kind}"]
            cpu_ratio = comparison[f"cpu_ratio_{kind}"]
            print(
                f"{label:<16} {mesh:>10,.0f} {reference_qps:>10,.0f} {ratio:>7.2f}   {cpu} ({cpu_ratio:.2f})"
            )


if __name__ == "__main__":
    main()
