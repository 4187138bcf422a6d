"""`aether demo`: start the demo mesh, show it live, walk through the scenario, keep running (or, with `--check`,
exit with the scenario's verdict)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

import attrs
import trio

from aether.demo.mesh import DemoMesh, open_demo_mesh
from aether.demo.scenario import StepResult, Timings, run_scenario
from aether.demo.view import CLEAR, render

__all__ = ["DemoOptions", "run_demo"]

REDRAW = 0.25
"""Seconds between two frames of the live view."""


@attrs.frozen(kw_only=True)
class DemoOptions:
    """What `aether demo` was asked for."""

    log_dir: Path | None = None
    """Where the run's files go (the event log in `log/`); a new directory when None."""
    check: bool = False
    """Run the scenario headless and exit with its verdict."""
    live: bool = True
    """Redraw the live view (only on a terminal)."""
    address_base: str = "127.0.10"
    netns: bool = False
    """Each pod in a network namespace of its own, joined by `aether-cni` (root only)."""
    json_report: Path | None = None
    """Also write the steps and timings as JSON here."""


def _process_age() -> float | None:
    """Seconds since this process started (Linux `/proc`), or None where that cannot be read."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)


async def _draw(mesh: DemoMesh, out: TextIO) -> None:
    while True:
        out.write(CLEAR + "\n".join(render(mesh.frame())) + "\n")
        out.flush()
        await trio.sleep(REDRAW)


def _report(results: list[StepResult], timings: Timings, served: dict[str, object]) -> dict[str, object]:
    return {
        "ok": all(result.ok for result in results) and bool(results),
        "steps": [attrs.asdict(result) for result in results],
        "timings": attrs.asdict(timings),
        "served": served,
    }


async def run_demo(options: DemoOptions, *, out: TextIO = sys.stdout) -> int:
    """Run the demo; return the exit status (0: every step behaved, or interrupted in live mode)."""
    work_dir = options.log_dir or Path(tempfile.mkdtemp(prefix="aether-demo-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    live = options.live and not options.check and out.isatty()
    print(f"aether demo: files and event log in {work_dir}", file=out, flush=True)
    results: list[StepResult] = []
    timings = Timings(process_start=_process_age())
    served: dict[str, object] = {}
    try:
        async with open_demo_mesh(work_dir, address_base=options.address_base, netns=options.netns) as mesh:

            def say(line: str) -> None:
                mesh.narration.append(line)
                if not live:
                    print(f"[{mesh.traffic.clock() - mesh.started_at:6.2f} s] {line}", file=out, flush=True)

            async with trio.open_nursery() as nursery:
                if live:
                    nursery.start_soon(_draw, mesh, out)
                results = await run_scenario(mesh, say=say, timings=timings)
                served = mesh.served()
                if options.check:
                    nursery.cancel_scope.cancel()
                else:
                    say(
                        f"the demo keeps running: edit the files in {mesh.manifests} and watch; Ctrl-C stops it"
                    )
                    await trio.sleep_forever()
    finally:
        report = _report(results, timings, served)
        if options.json_report is not None:
            options.json_report.write_text(json.dumps(report, indent=2) + "\n")
        for result in results:
            if not live:
                continue
            print(f"{'ok  ' if result.ok else 'FAIL'} {result.name}: {result.detail}", file=out)
        log = work_dir / "log"
        print(f"aether demo: the event log is in {log}", file=out)
        if served:
            print(
                f"aether demo: served snapshot at seq {served['seq']}; `aether log replay {log} --node demo "
                f"--until {served['seq']} --format snapshot` reproduces it, and `--explain <resource>` tells which "
                "events made a resource",
                file=out,
            )
    return 0 if report["ok"] else 1
