"""Benchmark `aether demo`: time to the first request routed through the mesh, to every xDS type SYNCED, and from
a route edit to the new split in traffic; against Envoy's own start measured in the same run.

Each run is a whole `aether demo --check` (registrar, agent, Envoy, workloads, scenario) in a fresh directory.
The first run is the cold start (Python imports, Envoy binary from disk); the later ones are warm starts, which
the issue's aim (first routed request within 5 s, a route edit in traffic within 1 s) is about. The reference
is a bare Envoy with a static bootstrap started until `/ready` answers: the floor any control plane adds to.

    python bench/bench_demo.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results

from aether.envoy.process import open_envoy
from aether.testing.envoy import static_bootstrap


def _demo_run(directory: Path) -> dict[str, float]:
    report = directory / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aether.cli",
            "demo",
            "--check",
            "--log-dir",
            str(directory / "run"),
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise SystemExit(f"aether demo --check failed:\n{result.stdout}\n{result.stderr}")
    timings: dict[str, float] = json.loads(report.read_text())["timings"]
    return timings


async def _envoy_ready(directory: Path) -> float:
    started = time.monotonic()
    async with open_envoy(static_bootstrap(listeners=[], clusters=[]), work_dir=directory, wait_live=True):
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()
    runs = []
    envoy = []
    with tempfile.TemporaryDirectory(prefix="aether-bench-demo-") as scratch:
        for index in range(arguments.runs):
            envoy.append(trio.run(_envoy_ready, Path(scratch) / f"envoy-{index}"))
            runs.append(_demo_run(Path(scratch) / f"demo-{index}"))
    for run in runs:  # from the command's start: the interpreter and imports come first
        run["first_routed_request_from_command"] = run["first_routed_request"] + (run["process_start"] or 0.0)
    warm = runs[1:] or runs
    figures = {
        key: {
            "cold_s": runs[0][key],
            "warm_median_s": statistics.median(run[key] for run in warm),
        }
        for key in (
            "process_start",
            "first_routed_request",
            "first_routed_request_from_command",
            "all_synced",
            "route_edit_acked",
            "route_edit_observed",
        )
    }
    envoy_ready = statistics.median(envoy)
    print(
        f"aether demo, {arguments.runs} runs (the first cold), reference: bare Envoy to /ready {envoy_ready * 1000:.0f} ms"
    )
    for key, values in figures.items():
        ratio = values["warm_median_s"] / envoy_ready
        print(
            f"  {key:<34} cold {values['cold_s'] * 1000:7.0f} ms   warm median {values['warm_median_s'] * 1000:7.0f} ms"
            f"   = {ratio:5.2f} x bare Envoy start"
        )
    print("  aim: first routed request <= 5 s warm; route edit observed in traffic <= 1 s")
    write_results("demo", {"runs": runs, "figures": figures, "envoy_ready_s": envoy_ready})


if __name__ == "__main__":
    main()
