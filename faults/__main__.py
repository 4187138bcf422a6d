"""`python -m faults`: run the long fault loops and print their figures (also written to bench/results/faults.json,
by loop, each with its size).

python -m faults [--restarts 50] [--trials 20] [--inputs 800] [--outage 60]
                 [--only edge,agent,registrar,inputs,spire]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

from faults.bad_inputs import bad_inputs
from faults.registrar_kills import registrar_kills
from faults.restarts import RATE, role_restarts
from faults.spire_outage import spire_outage

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results" / "faults.json"
LOOPS = ("edge", "agent", "registrar", "inputs", "spire")


async def _run(arguments: argparse.Namespace, work_dir: Path) -> tuple[dict[str, Any], bool]:
    figures: dict[str, Any] = {}
    healthy = True
    for loop in arguments.only:
        started = time.monotonic()
        own = work_dir / loop  # a directory per loop: the registrar trials' store is not the bad inputs' one
        if loop in ("edge", "agent"):
            restarts = await role_restarts(loop, own, restarts=arguments.restarts, rate=arguments.rate)
            lines, record = restarts.lines(), attrs.asdict(restarts)
            record |= {"resync_p50": restarts.resync_p50, "resync_max": restarts.resync_max}
            healthy &= restarts.failed == 0 and restarts.resync_max <= 1.0
        elif loop == "registrar":
            kills = await registrar_kills(own, trials=arguments.trials)
            lines, record = kills.lines(), attrs.asdict(kills)
            healthy &= kills.lost == 0
        elif loop == "spire":
            outage = await spire_outage(own, outage=arguments.outage)
            lines, record = outage.lines(), attrs.asdict(outage) | {"healthy": outage.healthy}
            healthy &= outage.healthy
        else:
            inputs = await bad_inputs(own, count=arguments.inputs)
            lines, record = inputs.lines(), attrs.asdict(inputs) | {"total": inputs.total}
            healthy &= not inputs.crashes and all(inputs.checks.values())
        record["size"] = {
            "edge": arguments.restarts,
            "agent": arguments.restarts,
            "registrar": arguments.trials,
            "spire": arguments.outage,
        }.get(loop, arguments.inputs)
        record["seconds"] = round(time.monotonic() - started, 1)
        figures[loop] = record
        print("\n".join(lines), flush=True)
    return figures, healthy


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--restarts", type=int, default=50, help="kill -9 restarts of the edge and of the agent"
    )
    parser.add_argument("--trials", type=int, default=20, help="kill -9 trials of the registrar")
    parser.add_argument("--inputs", type=int, default=800, help="bad inputs over every interface")
    parser.add_argument(
        "--outage", type=float, default=60.0, help="seconds the SPIFFE endpoints stay down (spire loop)"
    )
    parser.add_argument("--rate", type=float, default=RATE, help="requests/s through Envoy during restarts")
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=list(LOOPS),
        help=f"loops to run, of {','.join(LOOPS)}",
    )
    arguments = parser.parse_args()
    unknown = sorted(set(arguments.only) - set(LOOPS))
    if unknown:
        parser.error(f"--only: unknown loops {unknown!r} (known: {','.join(LOOPS)})")
    with tempfile.TemporaryDirectory(prefix="aether-faults-") as scratch:
        figures, healthy = trio.run(_run, arguments, Path(scratch))
    # A run of some loops (`--only`) keeps the others' last figures.
    kept = json.loads(RESULTS.read_text())["figures"] if RESULTS.exists() else {}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": "faults", "figures": kept | figures}
    RESULTS.write_text(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    print(f"faults: {'every aim met' if healthy else 'AN AIM WAS MISSED'}; figures in {RESULTS}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
