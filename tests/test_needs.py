"""The shared skip marker: every tool it knows comes from .ci/apt-packages, its reason names what is missing and the
fix, and no test module decides on its own whether a tool or root is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.needs import FIX, OTHER_TOOLS, TOOLS, missing, needs

ROOT_DIRECTORY = Path(__file__).parent.parent


def test_every_tool_comes_from_a_package_the_tests_session_installs() -> None:
    listed = {
        line.split("#", 1)[0].strip()
        for line in (ROOT_DIRECTORY / ".ci" / "apt-packages").read_text().splitlines()
    }
    assert set(TOOLS.values()) <= listed


def test_a_missing_tool_is_named_with_its_package_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert missing("nft", "dig") == ["nft (Debian nftables)", "dig (Debian dnsutils)"]
    marker = needs("nft")
    assert marker.args == (True,)
    assert marker.kwargs["reason"] == f"needs nft; missing nft (Debian nftables): {FIX}"


def test_a_tool_from_outside_debian_is_named_with_its_own_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    marker = needs("kubectl")
    assert marker.args == (True,)
    assert marker.kwargs["reason"] == f"needs kubectl; missing kubectl: {OTHER_TOOLS['kubectl']}"


def test_an_unknown_tool_is_a_mistake_in_the_test() -> None:
    with pytest.raises(KeyError):
        missing("no-such-tool")


def test_no_test_module_checks_for_root_or_a_tool_itself() -> None:
    own_checks = re.compile(r"shutil\.which\(|geteuid\(")
    offenders = [
        str(path.relative_to(ROOT_DIRECTORY))
        for directory in ("tests", "property_tests")
        for path in sorted((ROOT_DIRECTORY / directory).rglob("*.py"))
        if path.name not in {"needs.py", "test_needs.py"} and own_checks.search(path.read_text())
    ]
    assert offenders == []
