"""Command-line start-up: `aether --help`, `aether status` against a missing socket, and `aether-cni` VERSION.

Reference measured in the same run, interleaved with the commands: the bare interpreter (`python -c pass`, the same
Python the commands run on). Each figure is the median of `--runs` runs of a fresh process; the ratio that matters is
each command's time over the interpreter's, and the aim is each command within 0.15 s of it. Results are written to
bench/results/cli.json.

    python bench/bench_cli.py [--runs 21]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from _common import timed, write_results

AIM_SECONDS = 0.15
"""Each command within this of the bare interpreter."""
BIN = Path(sys.executable).parent


def _run(command: list[str], *, environ: Mapping[str, str] | None = None) -> None:
    subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=None if environ is None else {**os.environ, **environ},
        check=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (the median is reported)")
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as directory:
        missing_socket = str(Path(directory) / "missing.sock")
        commands: dict[str, tuple[str, list[str], Mapping[str, str] | None]] = {
            "python": ("python -c pass", [sys.executable, "-c", "pass"], None),
            "help": ("aether --help", [str(BIN / "aether"), "--help"], None),
            "status": (
                "aether status (no socket)",
                [str(BIN / "aether"), "status", "--admin", missing_socket],
                None,
            ),
            "cni_version": ("aether-cni VERSION", [str(BIN / "aether-cni")], {"CNI_COMMAND": "VERSION"}),
        }
        samples: dict[str, list[float]] = {key: [] for key in commands}
        for _, command, environ in commands.values():  # once each: warm the file cache and the .pyc files
            _run(command, environ=environ)
        for _ in range(runs):  # interleaved: a burst of load on the machine hits every command alike
            for key, (_, command, environ) in commands.items():
                samples[key].append(timed(functools.partial(_run, command, environ=environ)))
    medians = {key: statistics.median(values) for key, values in samples.items()}
    reference = medians["python"]
    print(f"command-line start-up: median of {runs} runs, against the bare interpreter in the same run")
    print(f"  {'command':<28} {'seconds':>8} {'over python':>12} {'ratio':>7}")
    figures: dict[str, object] = {"runs": runs, "python_seconds": round(reference, 4)}
    missed = []
    for key, (label, _, _) in commands.items():
        median = medians[key]
        print(f"  {label:<28} {median:8.3f} {median - reference:+12.3f} {median / reference:7.1f}")
        if key == "python":
            continue
        figures[f"{key}_seconds"] = round(median, 4)
        figures[f"{key}_over_python_seconds"] = round(median - reference, 4)
        figures[f"{key}_ratio"] = round(median / reference, 2)
        if median - reference > AIM_SECONDS:
            missed.append(label)
    print(
        f"  aim: each within {AIM_SECONDS} s of python: {'met' if not missed else 'NOT met: ' + ', '.join(missed)}"
    )
    write_results("cli", figures)


if __name__ == "__main__":
    main()
