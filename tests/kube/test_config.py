"""Tests of `aether.kube.config`: explicit URLs, kubeconfig files and in-cluster files, and TLS to the test server."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import sys
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.errors import ApiConnectionError, ConfigError
from aether.kube.resources import PODS
from aether.testing.kubeapi import open_kube_api
from tests.needs import needs

KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: test
contexts:
- name: test
  context: {{cluster: test, user: tester}}
- name: other
  context: {{cluster: test, user: exec-user}}
- name: legacy
  context: {{cluster: test, user: legacy}}
- name: exec-interactive
  context: {{cluster: test, user: exec-interactive}}
- name: exec-old
  context: {{cluster: test, user: exec-old}}
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: tester
  user: {{token: s3cret}}
- name: exec-user
  user:
    exec: {{command: aws}}
- name: legacy
  user: {{auth-provider: {{name: gcp}}}}
- name: exec-interactive
  user:
    exec: {{command: kubelogin, apiVersion: client.authentication.k8s.io/v1, interactiveMode: Always}}
- name: exec-old
  user:
    exec: {{command: kubelogin, apiVersion: client.authentication.k8s.io/v1alpha1}}
"""


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """Mint a CA and a server certificate for 127.0.0.1; return the CA, server certificate and key files.
    A client certificate of the same CA is written beside them (`client.crt`, `client.key`)."""
    now = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
    later = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test kubernetes ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common_name: str, serial: int, *extensions: x509.ExtensionType) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(now)
            .not_valid_after(later)
        )
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return _pem(builder.sign(ca_key, hashes.SHA256())), key_pem

    server = leaf(
        "kube-apiserver", 2, x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    )
    client = leaf("system:node:test", 3)
    paths = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    paths[0].write_bytes(_pem(ca))
    paths[1].write_bytes(server[0])
    paths[2].write_bytes(server[1])
    (directory / "client.crt").write_bytes(client[0])
    (directory / "client.key").write_bytes(client[1])
    return paths


def _server_context(certificate: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certificate), str(key))
    return context


async def test_kubeconfig_with_inline_ca_and_token_reaches_an_https_server(tmp_path: Path) -> None:
    """The current context's server, CA data and token: a TLS list that the token authorizes."""
    ca, certificate, key = _tls_files(tmp_path)
    async with open_kube_api(token="s3cret", ssl_context=_server_context(certificate, key)) as api:
        api.store.create(PODS, {"metadata": {"name": "a", "namespace": "shop"}})
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG.format(server=api.url, ca=base64.b64encode(ca.read_bytes()).decode()))
        config = ClusterConfig.from_kubeconfig(path)
        assert (config.server, config.source, config.tls) == (api.url, str(path), True)
        listed = await KubeClient(config).list_all(PODS)
        assert [item["metadata"]["name"] for item in listed.items] == ["a"]
        untrusted = ClusterConfig.from_url(api.url, token="s3cret")
        with pytest.raises(ApiConnectionError, match=r"certificate verify failed"):
            await KubeClient(untrusted).list_all(PODS)


async def test_in_cluster_reads_the_service_account_files_and_rereads_the_token(tmp_path: Path) -> None:
    """KUBERNETES_SERVICE_HOST/PORT, the token (re-read per connection, as it rotates) and the cluster CA."""
    ca, _, _ = _tls_files(tmp_path)
    (tmp_path / "token").write_text("first\n")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = ClusterConfig.from_in_cluster(directory=tmp_path, environ=environ)
    assert (config.server, config.host_and_port, config.source) == (
        "https://10.96.0.1:443",
        ("10.96.0.1", 443),
        "in-cluster",
    )
    assert await config.bearer() == "first"
    (tmp_path / "token").write_text("second")
    assert await config.bearer() == "second"
    assert ca.exists()


def test_in_cluster_outside_a_pod_is_refused(tmp_path: Path) -> None:
    """Without the service variables: a message saying what to use instead."""
    with pytest.raises(
        ConfigError,
        match=r"^kubernetes config 'in-cluster': KUBERNETES_SERVICE_HOST and .* use --kubeconfig or --kube-api$",
    ):
        ClusterConfig.from_in_cluster(directory=tmp_path, environ={})


def test_unsupported_credentials_and_bad_urls_are_refused(tmp_path: Path) -> None:
    """`auth-provider` users, malformed `exec` sections, missing contexts and non-HTTP servers: ConfigError naming
    the problem and the fix."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(server="https://127.0.0.1:6443", ca=""))
    for context, problem in [
        ("legacy", r"'auth-provider' credentials were removed from kubectl .* exec plugin"),
        ("other", r"user 'exec-user': exec.apiVersion: must be one of client.authentication"),
        ("exec-old", r"exec.apiVersion: .*\(got 'client.authentication.k8s.io/v1alpha1'\)$"),
        ("exec-interactive", r"exec.interactiveMode: Always needs a terminal .* \(IfAvailable or Never\)$"),
    ]:
        with pytest.raises(ConfigError, match=problem):
            ClusterConfig.from_kubeconfig(path, context=context)
    with pytest.raises(ConfigError, match=r"context 'missing' is not in 'contexts'$"):
        ClusterConfig.from_kubeconfig(path, context="missing")
    with pytest.raises(ConfigError, match=r"server must be http\(s\)://host\[:port\] \(got 'ftp://x'\)$"):
        ClusterConfig.from_url("ftp://x")


def test_tokens_never_show_in_reprs() -> None:
    """The token is Redacted: a config's repr does not print it."""
    assert "s3cret" not in repr(ClusterConfig.from_url("http://127.0.0.1:8001", token="s3cret"))


EXEC_KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: managed
contexts:
- name: managed
  context: {{cluster: managed, user: plugin}}
clusters:
- name: managed
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: plugin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./{command}
      interactiveMode: IfAvailable
      provideClusterInfo: true
      installHint: install it from the cloud's CLI
      env: [{{name: PLUGIN_DIR, value: {directory}}}]
"""

TOKEN_PLUGIN = """#!/bin/sh
# An exec credential plugin as a cloud CLI would be: counts its runs, records what kubectl/aether sent it,
# prints the token and expiry the test wrote.
runs=$(cat "$PLUGIN_DIR/runs" 2>/dev/null || echo 0)
echo $((runs + 1)) > "$PLUGIN_DIR/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$PLUGIN_DIR/exec-info"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}' \\
  "$(cat "$PLUGIN_DIR/token")" "$(cat "$PLUGIN_DIR/expiry")"
"""


def _exec_kubeconfig(directory: Path, *, server: str, ca: Path, plugin: str, command: str = "plugin") -> Path:
    script = directory / command
    script.write_text(plugin)
    script.chmod(0o755)
    path = directory / "kubeconfig"
    path.write_text(
        EXEC_KUBECONFIG.format(
            server=server, ca=base64.b64encode(ca.read_bytes()).decode(), command=command, directory=directory
        )
    )
    return path


def _runs(directory: Path) -> int:
    return int((directory / "runs").read_text())


async def test_an_exec_plugins_token_is_reused_until_it_expires_and_renewed_after_a_401(
    tmp_path: Path,
) -> None:
    """The plugin runs once for many requests while its token is fresh; a 401 (the token revoked) runs it again and
    the request succeeds; an expired token is renewed before use."""
    ca, certificate, key = _tls_files(tmp_path)
    (tmp_path / "token").write_text("first")
    (tmp_path / "expiry").write_text("2099-01-01T00:00:00Z")
    async with open_kube_api(token="first", ssl_context=_server_context(certificate, key)) as api:
        api.store.create(PODS, {"metadata": {"name": "a", "namespace": "shop"}})
        path = _exec_kubeconfig(tmp_path, server=api.url, ca=ca, plugin=TOKEN_PLUGIN)
        client = KubeClient(ClusterConfig.from_kubeconfig(path))
        for _ in range(3):
            assert [item["metadata"]["name"] for item in (await client.list_all(PODS)).items] == ["a"]
        assert _runs(tmp_path) == 1
        info = json.loads((tmp_path / "exec-info").read_text())
        assert info["kind"] == "ExecCredential"
        assert info["spec"]["interactive"] is False
        assert info["spec"]["cluster"]["server"] == api.url

        api.token = "second"  # the first token is revoked before its expiry
        (tmp_path / "token").write_text("second")
        assert [item["metadata"]["name"] for item in (await client.list_all(PODS)).items] == ["a"]
        assert _runs(tmp_path) == 2

        (tmp_path / "expiry").write_text("2001-01-01T00:00:00Z")  # the next credential is already expired
        api.token = "third"
        (tmp_path / "token").write_text("third")
        await client.list_all(PODS)  # 401, renewed: the new credential comes with a past expiry
        await client.list_all(PODS)  # so it is renewed again before this request
        assert _runs(tmp_path) == 4


@pytest.mark.parametrize(
    ("plugin", "problem"),
    [
        pytest.param(
            "#!/bin/sh\necho 'token service unreachable' >&2\nexit 3\n",
            r"exec plugin '.*/plugin' exited with 3: token service unreachable$",
            id="fails",
        ),
        pytest.param(
            "#!/bin/sh\necho not json\n",
            r"exec plugin '.*/plugin' printed output that is not JSON",
            id="not-json",
        ),
        pytest.param(
            '#!/bin/sh\necho \'{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",'
            '"status":{"token":"x"}}\'\n',
            r"exec plugin '.*/plugin' printed apiVersion 'client.authentication.k8s.io/v1beta1'; the kubeconfig asked for "
            r"'client.authentication.k8s.io/v1'$",
            id="other-version",
        ),
        pytest.param(
            '#!/bin/sh\necho \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
            '"status":{}}\'\n',
            r"exec plugin '.*/plugin' printed a status with neither a token nor clientCertificateData and clientKeyData$",
            id="no-credential",
        ),
        pytest.param(
            '#!/bin/sh\necho \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
            '"status":{"token":"x","expirationTimestamp":"tomorrow"}}\'\n',
            r"exec plugin '.*/plugin' printed an expirationTimestamp that is not RFC 3339",
            id="bad-expiry",
        ),
    ],
)
async def test_a_failing_exec_plugin_is_a_config_error_naming_the_plugin(
    tmp_path: Path, plugin: str, problem: str
) -> None:
    """Whatever goes wrong in the plugin, the role gets a ConfigError naming the kubeconfig, the plugin and why."""
    ca, _, _ = _tls_files(tmp_path)
    path = _exec_kubeconfig(tmp_path, server="https://127.0.0.1:6443", ca=ca, plugin=plugin)
    config = ClusterConfig.from_kubeconfig(path)
    with pytest.raises(ConfigError, match=rf"^kubernetes config '{path}': {problem}"):
        await config.bearer()


async def test_a_missing_exec_plugin_names_its_install_hint(tmp_path: Path) -> None:
    """A plugin that is not installed: the message carries the kubeconfig's installHint."""
    ca, _, _ = _tls_files(tmp_path)
    path = _exec_kubeconfig(tmp_path, server="https://127.0.0.1:6443", ca=ca, plugin="")
    (tmp_path / "plugin").unlink()
    with pytest.raises(
        ConfigError, match=r"is not installed or not executable; install it from the cloud's CLI$"
    ):
        await ClusterConfig.from_kubeconfig(path).bearer()


async def test_an_exec_plugins_client_certificate_is_presented_to_a_server_that_requires_one(
    tmp_path: Path,
) -> None:
    """A plugin that answers with a client certificate and key (no token): the TLS handshake presents them."""
    ca, certificate, key = _tls_files(tmp_path)
    plugin = f"""#!{sys.executable}
import json, pathlib
directory = pathlib.Path({str(tmp_path)!r})
status = {{"clientCertificateData": (directory / "client.crt").read_text(),
          "clientKeyData": (directory / "client.key").read_text()}}
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}}))
"""
    server = _server_context(certificate, key)
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(cafile=str(ca))
    async with open_kube_api(ssl_context=server) as api:
        api.store.create(PODS, {"metadata": {"name": "a", "namespace": "shop"}})
        path = _exec_kubeconfig(tmp_path, server=api.url, ca=ca, plugin=plugin)
        listed = await KubeClient(ClusterConfig.from_kubeconfig(path)).list_all(PODS)
        assert [item["metadata"]["name"] for item in listed.items] == ["a"]
        without = ClusterConfig.from_url(api.url, ca_file=ca)
        with pytest.raises(ApiConnectionError):
            await KubeClient(without).list_all(PODS)


@needs("kubectl")
async def test_kubectl_takes_the_same_kubeconfig_and_plugin(tmp_path: Path) -> None:
    """kubectl, the real client, lists with the kubeconfig and plugin the tests above use: the plugin speaks the
    protocol kubectl expects, so our client is tested against a faithful plugin."""
    ca, certificate, key = _tls_files(tmp_path)
    (tmp_path / "token").write_text("first")
    (tmp_path / "expiry").write_text("2099-01-01T00:00:00Z")
    async with open_kube_api(token="first", ssl_context=_server_context(certificate, key)) as api:
        api.store.create(PODS, {"metadata": {"name": "a", "namespace": "shop"}})
        path = _exec_kubeconfig(tmp_path, server=api.url, ca=ca, plugin=TOKEN_PLUGIN)
        listed = await trio.run_process(
            ["kubectl", "--kubeconfig", str(path), "get", "pods", "-n", "shop", "-o", "name"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert (listed.returncode, listed.stdout.decode().split()) == (0, ["pod/a"]), listed.stderr
    assert _runs(tmp_path) >= 1
