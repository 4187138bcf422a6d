"""A kubeconfig user's `exec` credential plugin: the program a managed cluster's kubeconfig names to get a token.

Managed clusters (EKS's `aws eks get-token`, GKE's `gke-gcloud-auth-plugin`, AKS's `kubelogin`) put no token
in the kubeconfig: its user has an `exec` section naming a program that prints an `ExecCredential`
(`client.authentication.k8s.io/v1` or `v1beta1`) on stdout. The protocol, as kubectl and client-go speak it:

- The program gets the parent's environment, plus the section's `env`, plus `KUBERNETES_EXEC_INFO`: an
  ExecCredential whose `spec` says whether it may prompt (`interactive`; never here, a role has no terminal)
  and, when the section sets `provideClusterInfo`, describes the cluster.
- It prints an ExecCredential whose `status` holds a bearer `token`, or a client certificate and key
  (`clientCertificateData`, `clientKeyData`, PEM), and optionally `expirationTimestamp` (RFC 3339).
- The credential is reused until it expires; an API answer of 401 means it was revoked early, so the next
  request runs the program again.

Why not the `kubernetes` package's `ExecProvider`: importing `kubernetes.config` costs 0.4-1.0 s and 30
packages (measured in a fresh venv), it runs the program with blocking `subprocess` calls, and its loader logs a
failing plugin instead of raising, so a role would start without credentials and only see 401s. This module is
the protocol's few rules on `trio.run_process`, with every failure a `ConfigError` naming the kubeconfig and
the fix.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from aether.core.values import Redacted
from aether.kube.errors import ConfigError

__all__ = ["EXEC_API_VERSIONS", "EXEC_TIMEOUT", "ExecCredential", "ExecPlugin", "load_client_certificate"]

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
"""The ExecCredential versions kubectl still speaks (`v1alpha1` was removed in Kubernetes 1.24)."""

EXEC_TIMEOUT = 60.0
"""Seconds a plugin may take: cloud plugins call their provider's token service, which answers in about a second;
a plugin that hangs must not hold a role's every request forever."""

REFRESH_BEFORE = datetime.timedelta(seconds=10)
"""Run the plugin again this long before the credential's `expirationTimestamp`, so that no request is sent with
a token that expires on the way."""

_OUTPUT_LIMIT = 1000
"""Characters of a failing plugin's stderr quoted in the error."""


@attrs.frozen(kw_only=True)
class ExecCredential:
    """What one run of the plugin gave: a token, or a client certificate and key; and until when."""

    token: Redacted | None = None
    certificate: Redacted | None = None
    """PEM client certificate chain (with `key`), for plugins that authenticate by certificate."""
    key: Redacted | None = None
    expires: datetime.datetime | None = None
    """When it stops being valid (aware, UTC); None: until the server answers 401."""

    def fresh(self, now: datetime.datetime) -> bool:
        """Whether it may still be presented at `now`."""
        return self.expires is None or now < self.expires - REFRESH_BEFORE


class ExecPlugin:
    """The `exec` section of one kubeconfig user: runs the program when a credential is needed, caches its answer.

    Build it with `from_kubeconfig`, which checks the section once at start-up, so that a malformed section is
    refused before a role serves anything. `current()` is safe to call from many tasks at once: one run serves
    them all.
    """

    def __init__(
        self,
        *,
        source: str,
        command: list[str],
        environment: Mapping[str, str],
        api_version: str,
        cluster: Mapping[str, Any] | None,
        install_hint: str,
    ) -> None:
        self.source = source
        self.command = command
        self.environment = dict(environment)
        self.api_version = api_version
        self.cluster = None if cluster is None else dict(cluster)
        self.install_hint = install_hint
        self.runs = 0
        """How many times the program ran (a credential is reused until it expires or is refused)."""
        self._credential: ExecCredential | None = None
        self._in_context: ExecCredential | None = None
        """The certificate credential last loaded into the TLS context (loaded again only when it changes)."""
        self._lock = trio.Lock()

    @classmethod
    def from_kubeconfig(
        cls, section: object, *, source: str, user: str, base: Path, cluster: Mapping[str, Any]
    ) -> ExecPlugin:
        """Check a kubeconfig user's `exec` section and return its plugin.

        Args:
            section: The value of `users[].user.exec`.
            source: The kubeconfig's path, for messages.
            user: The user's name, for messages.
            base: The kubeconfig's directory: a relative command path (one with a `/`) is relative to it.
            cluster: The context's cluster section (sent to the plugin when `provideClusterInfo` is set).

        Raises:
            ConfigError: If the section lacks `command` or `apiVersion`, names a version kubectl no longer speaks,
                asks for an interactive plugin (`interactiveMode: Always`: a role has no terminal), or has
                malformed `args` or `env`.
        """
        where = f"user {user!r}: exec"
        if not isinstance(section, dict):
            raise ConfigError(source, problem=f"{where}: must be a mapping with command and apiVersion")
        command = section.get("command")
        if not isinstance(command, str) or not command:
            raise ConfigError(source, problem=f"{where}.command: the plugin program to run is required")
        api_version = section.get("apiVersion")
        if api_version not in EXEC_API_VERSIONS:
            raise ConfigError(
                source,
                problem=f"{where}.apiVersion: must be one of {', '.join(EXEC_API_VERSIONS)} (got {api_version!r})",
            )
        if section.get("interactiveMode") == "Always":
            raise ConfigError(
                source,
                problem=f"{where}.interactiveMode: Always needs a terminal to prompt on, and a role has none; "
                "configure the plugin to get its credential without prompting (IfAvailable or Never)",
            )
        arguments = section.get("args") or []
        if not isinstance(arguments, list) or not all(isinstance(item, str) for item in arguments):
            raise ConfigError(source, problem=f"{where}.args: must be a list of strings")
        environment: dict[str, str] = {}
        entries = section.get("env") or []
        if not isinstance(entries, list):
            raise ConfigError(source, problem=f"{where}.env: must be a list of name and value mappings")
        for index, entry in enumerate(entries):
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("name"), str)
                and isinstance(entry.get("value"), str)
            ):
                raise ConfigError(
                    source, problem=f"{where}.env[{index}]: must be a mapping with name and value"
                )
            environment[entry["name"]] = entry["value"]
        program = str(base / command) if "/" in command and not command.startswith("/") else command
        return cls(
            source=source,
            command=[program, *arguments],
            environment=environment,
            api_version=api_version,
            cluster=_cluster_info(cluster) if section.get("provideClusterInfo") else None,
            install_hint=str(section.get("installHint") or ""),
        )

    async def current(self) -> ExecCredential:
        """Return a credential to present now: the cached one while fresh, else the program's new answer.

        Raises:
            ConfigError: If the program is missing, fails, times out, or prints something that is not an
                ExecCredential with a token or a certificate and key.
        """
        async with self._lock:
            if self._credential is None or not self._credential.fresh(datetime.datetime.now(datetime.UTC)):
                self._credential = await self._run()
            return self._credential

    async def bearer(self, context: ssl.SSLContext | None) -> str | None:
        """Return the token to present now; or, for a certificate credential, load it into `context`, return None.

        Raises:
            ConfigError: As `current()`; or the plugin gave a certificate for a server without TLS, or one that
                does not load.
        """
        credential = await self.current()
        if credential.token is not None:
            return credential.token.secret.decode()
        if context is None:
            raise ConfigError(
                self.source, problem="the exec plugin gave a client certificate; that needs an https server"
            )
        if credential is not self._in_context:
            load_client_certificate(context, credential, source=self.source)
            self._in_context = credential
        return None

    def refused(self) -> None:
        """The server answered 401 to the cached credential: forget it, so the next use runs the program again."""
        self._credential = None

    async def _run(self) -> ExecCredential:
        program = self.command[0]
        if shutil.which(program) is None:
            hint = f"; {self.install_hint.strip()}" if self.install_hint else ""
            raise ConfigError(
                self.source, problem=f"exec plugin {program!r} is not installed or not executable{hint}"
            )
        info: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        if self.cluster is not None:
            info["spec"]["cluster"] = self.cluster
        environment = {**os.environ, **self.environment, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        self.runs += 1
        try:
            with trio.fail_after(EXEC_TIMEOUT):
                finished = await trio.run_process(
                    self.command,
                    env=environment,
                    stdin=b"",
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
        except trio.TooSlowError:
            raise ConfigError(
                self.source, problem=f"exec plugin {program!r} gave no credential within {EXEC_TIMEOUT:.0f} s"
            ) from None
        except OSError as error:
            raise ConfigError(
                self.source, problem=f"exec plugin {program!r} could not run: {error}"
            ) from error
        if finished.returncode != 0:
            stderr = finished.stderr.decode("utf-8", "replace").strip()[:_OUTPUT_LIMIT]
            raise ConfigError(
                self.source,
                problem=f"exec plugin {program!r} exited with {finished.returncode}"
                + (f": {stderr}" if stderr else ""),
            )
        return self._parse(finished.stdout, program=program)

    def _parse(self, stdout: bytes, *, program: str) -> ExecCredential:
        def refuse(problem: str) -> ConfigError:
            return ConfigError(self.source, problem=f"exec plugin {program!r} printed {problem}")

        try:
            document = json.loads(stdout)
        except ValueError as error:
            raise refuse(f"output that is not JSON ({error})") from error
        if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
            raise refuse("something that is not an ExecCredential")
        if document.get("apiVersion") != self.api_version:
            raise refuse(
                f"apiVersion {document.get('apiVersion')!r}; the kubeconfig asked for {self.api_version!r}"
            )
        status = document.get("status")
        if not isinstance(status, dict):
            raise refuse("an ExecCredential without a status")
        expires = None
        if status.get("expirationTimestamp") is not None:
            try:
                expires = datetime.datetime.fromisoformat(str(status["expirationTimestamp"]))
            except ValueError as error:
                raise refuse(f"an expirationTimestamp that is not RFC 3339 ({error})") from error
            if expires.tzinfo is None:
                raise refuse("an expirationTimestamp without a time zone")
        token = status.get("token")
        if isinstance(token, str) and token:
            return ExecCredential(token=Redacted(token.encode()), expires=expires)
        certificate, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if isinstance(certificate, str) and certificate and isinstance(key, str) and key:
            return ExecCredential(
                certificate=Redacted(certificate.encode()), key=Redacted(key.encode()), expires=expires
            )
        raise refuse("a status with neither a token nor clientCertificateData and clientKeyData")


def load_client_certificate(context: ssl.SSLContext, credential: ExecCredential, *, source: str) -> None:
    """Make `context` present the credential's client certificate on its next handshakes.

    `SSLContext.load_cert_chain` replaces the context's certificate, so connections opened from now on use the
    rotated one while open connections keep theirs.

    Raises:
        ConfigError: If the certificate and key do not load.
    """
    assert credential.certificate is not None
    assert credential.key is not None
    with tempfile.TemporaryDirectory() as scratch:
        certificate, key = Path(scratch) / "client.crt", Path(scratch) / "client.key"
        certificate.write_bytes(credential.certificate.secret)
        key.write_bytes(credential.key.secret)
        try:
            context.load_cert_chain(str(certificate), str(key))
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(
                source, problem=f"exec plugin's client certificate does not load: {error}"
            ) from error


_CLUSTER_FIELDS = (
    "server",
    "tls-server-name",
    "insecure-skip-tls-verify",
    "certificate-authority-data",
    "proxy-url",
    "disable-compression",
)
"""The kubeconfig cluster fields client-go's `Cluster` (the exec info's `spec.cluster`) carries, same names."""


def _cluster_info(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The `spec.cluster` of KUBERNETES_EXEC_INFO: the kubeconfig's cluster fields, and the plugin's own `config`
    from the cluster's `client.authentication.k8s.io/exec` extension."""
    info = {field: cluster[field] for field in _CLUSTER_FIELDS if field in cluster}
    extensions = cluster.get("extensions") or ()
    for extension in extensions if isinstance(extensions, list) else ():
        if isinstance(extension, dict) and extension.get("name") == "client.authentication.k8s.io/exec":
            info["config"] = extension.get("extension")
    return info
