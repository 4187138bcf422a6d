"""`aether demo --netns` on a machine that cannot run it: one line naming the problem and the fix, exit 1, and
nothing started or created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aether.cli.demo_command import netns_problem
from tests.needs import ROOT, missing


def test_without_root_the_netns_demo_names_root_and_the_fix() -> None:
    assert netns_problem(euid=1000, which=lambda tool: f"/usr/sbin/{tool}") == (
        "--netns creates network namespaces and needs root: run the demo as root, or without --netns"
    )


def test_without_nft_or_ip_the_netns_demo_names_what_to_install() -> None:
    assert netns_problem(euid=0, which=lambda tool: None) == (
        "--netns needs nft and ip, not found on PATH: install them (Debian: apt-get install nftables iproute2),"
        " or run the demo without --netns"
    )
    assert netns_problem(euid=0, which=lambda tool: f"/usr/sbin/{tool}") is None


def test_a_netns_demo_that_cannot_run_exits_1_before_starting_anything(tmp_path: Path) -> None:
    """With nothing on PATH (so neither nft nor ip, whoever runs the test), the command refuses in one line and
    creates nothing: no run directory, no namespace."""
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aether.cli",
            "demo",
            "--netns",
            "--check",
            "--log-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(tmp_path / "empty")},
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("aether: error: --netns ")
    assert result.stderr.count("\n") == 1
    assert ("needs root" if missing(ROOT) else "apt-get install nftables iproute2") in result.stderr
    assert not (tmp_path / "run").exists()
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert after <= before
