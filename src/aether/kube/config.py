"""Where the Kubernetes API is and how to authenticate: an explicit URL, a kubeconfig file, or the in-cluster files.

Reading the configuration is blocking file I/O done once at startup, before the trio loop serves anything;
the bearer token file is re-read on every connection (through a thread), because in-cluster tokens rotate.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio
import yaml

from aether.core.values import Redacted
from aether.kube.credentials import ExecPlugin
from aether.kube.errors import ConfigError
from aether.kube.yaml_documents import RefusedDocument, load_documents

__all__ = ["SERVICE_ACCOUNT_DIR", "ClusterConfig"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's service account token, the cluster CA and the pod's namespace."""


@attrs.frozen(kw_only=True)
class ClusterConfig:
    """How to reach one API server. Build it with a named constructor, never by hand."""

    server: str
    """The base URL: `https://10.96.0.1:443`, `http://127.0.0.1:8001`."""
    source: str
    """Where this came from (`in-cluster`, a kubeconfig path, `--kube-api`), for messages."""
    token: Redacted | None = None
    """A fixed bearer token."""
    token_file: Path | None = None
    """A bearer token file, re-read for each connection (it rotates in-cluster); wins over `token`."""
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, eq=False)
    """The TLS client context for `https` servers (CA, client certificate); None for `http`."""
    exec_plugin: ExecPlugin | None = attrs.field(default=None, eq=False)
    """A kubeconfig user's credential plugin (see `aether.kube.credentials`); wins over the token fields."""

    @property
    def host_and_port(self) -> tuple[str, int]:
        """The server's host and port (443 or 80 by default)."""
        split = _split(self.server, source=self.source)
        return split.hostname or "", split.port or (443 if split.scheme == "https" else 80)

    @property
    def tls(self) -> bool:
        """Whether connections use TLS."""
        return _split(self.server, source=self.source).scheme == "https"

    async def bearer(self) -> str | None:
        """Return the bearer token to present now (the file's content, stripped; the plugin's token), or None.

        With a credential plugin that gives a client certificate, the TLS context is updated to present it
        and None is returned.

        Raises:
            ConfigError: If the token file cannot be read, or the credential plugin fails.
        """
        if self.exec_plugin is not None:
            return await self.exec_plugin.bearer(self.ssl_context)
        if self.token_file is not None:
            try:
                text = await trio.Path(self.token_file).read_text()
            except OSError as error:
                raise ConfigError(str(self.token_file), problem=f"cannot read the token: {error}") from error
            return text.strip()
        return None if self.token is None else self.token.secret.decode()

    def refused(self) -> bool:
        """The server answered 401: drop a credential that can be renewed; return whether a retry may succeed.

        Only a plugin's credential is renewable (a fixed token stays refused; a token file is re-read anyway).
        """
        if self.exec_plugin is None:
            return False
        self.exec_plugin.refused()
        return True

    @classmethod
    def from_url(
        cls, server: str, *, token: str | None = None, ca_file: Path | None = None, insecure: bool = False
    ) -> ClusterConfig:
        """Return the configuration for an explicit URL (`--kube-api`), as `kubectl --server` would use it.

        Raises:
            ConfigError: If the URL is not `http(s)://host[:port]`, or the CA file does not load.
        """
        source = f"--kube-api {server}"
        split = _split(server, source=source)
        context = (
            _tls_context(source, ca_file=ca_file, insecure=insecure) if split.scheme == "https" else None
        )
        return cls(
            server=server.rstrip("/"),
            source=source,
            token=None if token is None else Redacted(token.encode()),
            ssl_context=context,
        )

    @classmethod
    def from_in_cluster(
        cls, *, directory: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] | None = None
    ) -> ClusterConfig:
        """Return the configuration of a pod: `KUBERNETES_SERVICE_HOST/PORT`, the service account token and CA.

        Raises:
            ConfigError: If the variables are unset (not running in a pod) or the files are missing.
        """
        environ = os.environ if environ is None else environ
        host = environ.get("KUBERNETES_SERVICE_HOST", "")
        port = environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise ConfigError(
                "in-cluster",
                problem="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset: not running in a pod; "
                "use --kubeconfig or --kube-api",
            )
        token_file = directory / "token"
        if not token_file.is_file():
            raise ConfigError("in-cluster", problem=f"service account token {str(token_file)!r} is missing")
        server_host = f"[{host}]" if ":" in host else host
        return cls(
            server=f"https://{server_host}:{port}",
            source="in-cluster",
            token_file=token_file,
            ssl_context=_tls_context("in-cluster", ca_file=directory / "ca.crt"),
        )

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None) -> ClusterConfig:
        """Return the configuration of a kubeconfig context (the file's current context by default).

        Supported user credentials: `token`, `tokenFile`, client certificates (files or inline data), and `exec`
        credential plugins (`aether.kube.credentials`), run when a request needs them.

        Raises:
            ConfigError: If the file does not parse, the context, cluster or user is missing, the `exec` section
                is malformed, or the user has an `auth-provider` (removed from kubectl).
        """
        source = str(path)
        try:
            documents = list(load_documents(path.read_text()))
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(source, problem=f"cannot read the kubeconfig: {error}") from error
        document = documents[0] if len(documents) == 1 else None
        if isinstance(document, RefusedDocument):
            raise ConfigError(source, problem=f"cannot read the kubeconfig: {document.reason}")
        if not isinstance(document, dict):
            raise ConfigError(source, problem="a kubeconfig is a mapping with clusters, users and contexts")
        name = context or document.get("current-context") or ""
        if not name:
            raise ConfigError(source, problem="no current-context; pass a context name")
        chosen = _named(document, "contexts", "context", name, source=source)
        cluster = _named(document, "clusters", "cluster", str(chosen.get("cluster", "")), source=source)
        user = (
            _named(document, "users", "user", str(chosen.get("user", "")), source=source)
            if chosen.get("user")
            else {}
        )
        if "auth-provider" in user:
            raise ConfigError(
                source,
                problem=f"user of context {name!r}: 'auth-provider' credentials were removed from kubectl in "
                "Kubernetes 1.26; use the provider's exec plugin (users[].user.exec), a token or a client certificate",
            )
        server = str(cluster.get("server", ""))
        split = _split(server, source=source)
        base = path.parent
        ssl_context = None
        if split.scheme == "https":
            with tempfile.TemporaryDirectory() as scratch:
                files = _Materialized(source, base=base, scratch=Path(scratch))
                ssl_context = _tls_context(
                    source,
                    ca_file=files.file(cluster, "certificate-authority"),
                    insecure=bool(cluster.get("insecure-skip-tls-verify")),
                    cert_file=files.file(user, "client-certificate"),
                    key_file=files.file(user, "client-key"),
                )
        token_file = user.get("tokenFile")
        plugin = (
            ExecPlugin.from_kubeconfig(
                user["exec"], source=source, user=str(chosen.get("user")), base=base, cluster=cluster
            )
            if "exec" in user
            else None
        )
        return cls(
            server=server.rstrip("/"),
            source=source,
            token=Redacted(str(user["token"]).encode()) if user.get("token") else None,
            token_file=None if not token_file else base / str(token_file),
            ssl_context=ssl_context,
            exec_plugin=plugin,
        )


class _Materialized:
    """Paths of a kubeconfig's certificates: `<field>` files as given, `<field>-data` written to `scratch`."""

    def __init__(self, source: str, *, base: Path, scratch: Path) -> None:
        self._source = source
        self._base = base
        self._scratch = scratch

    def file(self, section: Mapping[str, Any], field: str) -> Path | None:
        if section.get(f"{field}-data"):
            try:
                content = base64.b64decode(str(section[f"{field}-data"]), validate=True)
            except ValueError as error:
                raise ConfigError(self._source, problem=f"{field}-data: not base64 ({error})") from error
            target = self._scratch / field
            target.write_bytes(content)
            return target
        if section.get(field):
            return self._base / str(section[field])
        return None


def _named(
    document: Mapping[str, Any], plural: str, singular: str, name: str, *, source: str
) -> dict[str, Any]:
    entries = document.get(plural) or ()
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(singular), dict):
            found: dict[str, Any] = entry[singular]
            return found
    raise ConfigError(source, problem=f"{singular} {name!r} is not in {plural!r}")


def _split(server: str, *, source: str) -> urllib.parse.SplitResult:
    split = urllib.parse.urlsplit(server)
    if split.scheme not in ("http", "https") or not split.hostname or split.path not in ("", "/"):
        raise ConfigError(source, problem=f"server must be http(s)://host[:port] (got {server!r})")
    return split


def _tls_context(
    source: str,
    *,
    ca_file: Path | None,
    insecure: bool = False,
    cert_file: Path | None = None,
    key_file: Path | None = None,
) -> ssl.SSLContext:
    context = ssl.create_default_context()
    try:
        if ca_file is not None:
            context.load_verify_locations(cafile=str(ca_file))
        if cert_file is not None:
            context.load_cert_chain(str(cert_file), None if key_file is None else str(key_file))
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(source, problem=f"cannot load the TLS files: {error}") from error
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
