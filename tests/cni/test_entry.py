"""`aether-cni` answers VERSION from the config module alone: no trio, gRPC, protobuf or netlink loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_MODULES_AFTER_VERSION = """
import json, sys
from aether.cni.entry import main
try:
    main()
except SystemExit as exit:
    print(json.dumps({"status": exit.code, "modules": sorted(sys.modules)}))
"""


def test_version_loads_none_of_the_plugins_machinery() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER_VERSION],
        input='{"cniVersion": "1.0.0"}',
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "CNI_COMMAND": "VERSION"},
    )
    answer, report = done.stdout.splitlines()
    assert json.loads(answer) == {"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"]}
    result = json.loads(report)
    assert result["status"] == 0
    heavy = ("trio", "purerpc", "google.protobuf", "pyroute2", "aether.xds", "aether.cni.plugin")
    assert [name for name in result["modules"] if name.startswith(heavy)] == []
