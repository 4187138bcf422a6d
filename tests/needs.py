"""`needs(...)`: the one skip marker of every test that needs root or a system tool, with one kind of reason.

A fresh Debian machine gets every tool here from `nox -s tests` run as root (it installs `.ci/apt-packages`), so a
skip names what is missing and that fix:

    pytestmark = needs("root", "nft", "ip")
"""

from __future__ import annotations

import os
import shutil

import pytest

ROOT = "root"
TOOLS = {
    "cc": "gcc",
    "dig": "dnsutils",
    "dnsperf": "dnsperf",
    "ip": "iproute2",
    "nft": "nftables",
    "unbound": "unbound",
}
"""Each tool a test may run, and the Debian package (listed in .ci/apt-packages) that installs it."""
FIX = "run `nox -s tests` as root on Debian (it installs .ci/apt-packages)"
OTHER_TOOLS = {
    "kubectl": "install kubectl v1.32 or later (kustomize v5 inside) from https://dl.k8s.io;"
    " Debian's kubernetes-client 1.20 is too old",
}
"""Each tool a test may run that no Debian package provides at a version that works, and how to get it."""


def missing(*what: str) -> list[str]:
    """The items of `what` this machine lacks, each described: `root`, or `nft (Debian nftables)`.

    Raises:
        KeyError: An item is neither `root` nor a tool of `TOOLS` (a typo in a test).
    """
    found: list[str] = []
    for item in what:
        if item == ROOT:
            if os.geteuid() != 0:
                found.append(ROOT)
        elif item in OTHER_TOOLS:
            if shutil.which(item) is None:
                found.append(item)
        elif item == "cc" and (os.environ.get("CC") and shutil.which(os.environ["CC"])):
            continue
        elif shutil.which(item) is None:
            found.append(f"{item} (Debian {TOOLS[item]})")
    return found


def needs(*what: str) -> pytest.MarkDecorator:
    """A `skipif` marker: skip unless the machine has every item of `what` (`root` and tool names of `TOOLS`)."""
    lacking = missing(*what)
    fixes = [OTHER_TOOLS[item] for item in lacking if item in OTHER_TOOLS]
    if len(fixes) < len(lacking):
        fixes.append(FIX)
    return pytest.mark.skipif(
        bool(lacking), reason=f"needs {', '.join(what)}; missing {', '.join(lacking)}: {'; '.join(fixes)}"
    )
