"""The webhooks' serving certificate: a mounted pair serves (and its caBundle is left to the installer), a pair
whose key does not match is refused naming both files, and a stored Secret that is not a TLS pair leaves the
replica running without webhooks, the reason logged."""

from __future__ import annotations

import base64
import datetime
import logging
from pathlib import Path

import pytest
import trio

from aether.controller import (
    SERVING_SECRET,
    TlsFilesInvalid,
    WebhookOptions,
    WebhookServer,
    generate_serving_certificate,
    serve_webhooks,
)
from aether.controller.webhook_tls import load_serving_certificate
from aether.kube import ClusterConfig, KubeClient
from aether.kube.resources import SECRETS
from aether.testing.kubeapi import open_kube_api
from aether.testing.kubediscovery import served_resources
from tests.controller.test_webhooks import _post

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _write_pair(directory: Path, *, key_of_another: bool = False) -> tuple[Path, Path, bytes]:
    pair = generate_serving_certificate(now=NOW)
    other = generate_serving_certificate(now=NOW) if key_of_another else pair
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(pair.certificate_pem)
    key.write_bytes(other.key_pem)
    return cert, key, pair.ca_pem


async def test_a_mounted_pair_serves_and_no_secret_is_written(tmp_path: Path) -> None:
    cert, key, ca_pem = _write_pair(tmp_path)
    async with open_kube_api(resources=served_resources()) as api:
        client = KubeClient(ClusterConfig.from_url(api.url))
        options = WebhookOptions(host="127.0.0.1", port=0, cert_file=cert, key_file=key, image="aether:1")
        async with trio.open_nursery() as nursery:
            server = await nursery.start(serve_webhooks, client, options)
            assert isinstance(server, WebhookServer)
            answer = await _post(
                server.port, ca_pem, b"POST /mutate-pod HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
            )
            assert answer.startswith(b"HTTP/1.1 400 ")
            nursery.cancel_scope.cancel()
        namespace, name = SERVING_SECRET
        assert api.store.get(SECRETS, name=name, namespace=namespace) is None


def test_a_key_of_another_certificate_is_refused_naming_the_files(tmp_path: Path) -> None:
    cert, key, _ = _write_pair(tmp_path, key_of_another=True)
    with pytest.raises(TlsFilesInvalid) as raised:
        load_serving_certificate(cert, key)
    assert str(raised.value).startswith(
        f"webhook serving certificate {str(cert)!r} and {str(key)!r}: not a PEM"
    )
    with pytest.raises(TlsFilesInvalid, match="cannot be read"):
        load_serving_certificate(tmp_path / "missing.crt", key)


async def test_a_secret_that_is_not_a_tls_pair_leaves_the_replica_without_webhooks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    namespace, name = SERVING_SECRET
    broken = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": base64.b64encode(b"not pem").decode(), "tls.key": "", "ca.crt": ""},
    }
    async with open_kube_api(resources=served_resources()) as api:
        api.store.create(SECRETS, broken)
        client = KubeClient(ClusterConfig.from_url(api.url))
        with caplog.at_level(logging.ERROR, logger="aether.controller.webhooks"):
            async with trio.open_nursery() as nursery:
                server = await nursery.start(serve_webhooks, client, WebhookOptions(port=0, image="aether:1"))
        assert server is None
        [record] = caplog.records
        assert f"Secret {namespace}/{name}: not a PEM certificate and matching key" in record.getMessage()
