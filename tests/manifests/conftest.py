"""Fixtures of the manifest tests: every overlay rendered once per session, by the real kubectl."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.manifests.rendered import OVERLAYS, Object, prepared_manifests, render


@pytest.fixture(scope="session")
def manifests_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`manifests/` copied, its etcd overlay given the example `etcd.env`."""
    return prepared_manifests(tmp_path_factory.mktemp("manifests"))


@pytest.fixture(scope="session")
def rendered(manifests_copy: Path) -> dict[str, list[Object]]:
    """Every overlay's objects, by overlay name."""
    return {overlay: render(manifests_copy / "overlays" / overlay) for overlay in OVERLAYS}


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest, rendered: dict[str, list[Object]]) -> list[Object]:
    """One overlay's objects (the test runs once per overlay)."""
    objects: list[Object] = rendered[request.param]
    return objects
