"""Tests of `aether.kube.config`: explicit URLs, kubeconfig files and in-cluster files, and TLS to the test server."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.errors import ApiConnectionError, ConfigError
from aether.kube.resources import PODS
from aether.testing.kubeapi import open_kube_api

KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: test
contexts:
- name: test
  context: {{cluster: test, user: tester}}
- name: other
  context: {{cluster: test, user: exec-user}}
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
"""


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """Mint a CA and a server certificate for 127.0.0.1; return the CA, server certificate and key files."""
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
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    paths[0].write_bytes(_pem(ca))
    paths[1].write_bytes(_pem(server))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
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
    """`exec` users, missing contexts and non-HTTP servers: ConfigError naming the problem."""
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(server="https://127.0.0.1:6443", ca=""))
    with pytest.raises(
        ConfigError, match=r"'exec' credentials are not supported; use a token or a client certificate$"
    ):
        ClusterConfig.from_kubeconfig(path, context="other")
    with pytest.raises(ConfigError, match=r"context 'missing' is not in 'contexts'$"):
        ClusterConfig.from_kubeconfig(path, context="missing")
    with pytest.raises(ConfigError, match=r"server must be http\(s\)://host\[:port\] \(got 'ftp://x'\)$"):
        ClusterConfig.from_url("ftp://x")


def test_tokens_never_show_in_reprs() -> None:
    """The token is Redacted: a config's repr does not print it."""
    assert "s3cret" not in repr(ClusterConfig.from_url("http://127.0.0.1:8001", token="s3cret"))
