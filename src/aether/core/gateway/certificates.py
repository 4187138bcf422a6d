"""The check of a listener's certificate Secret: PEM blocks of the kinds Envoy loads, each base64 DER, read without
parsing a certificate (the core imports no cryptography: tests/core/test_purity.py).

What this cannot see: a certificate whose DER is corrupt past its first byte, an expired one, or a key that is not
the certificate's. Those the edge Envoy refuses when it loads them.
"""

from __future__ import annotations

import re

from aether.core.events.kube import TlsSecret

_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END ([A-Z0-9 ]+)-----", re.DOTALL)
_BASE64 = re.compile(rb"[A-Za-z0-9+/]+={0,2}")
_WHITESPACE = re.compile(rb"\s+")
CERTIFICATE_LABEL = "CERTIFICATE"
KEY_LABELS = ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY")
"""The private key blocks Envoy loads without a password (PKCS#8, PKCS#1, SEC 1)."""


def _blocks(pem: bytes, entry: str) -> tuple[list[str], str]:
    """Return the labels of the PEM blocks in `pem`, and what is wrong with them (empty when nothing)."""
    labels: list[str] = []
    for index, block in enumerate(_BLOCK.finditer(pem), start=1):
        label, body, end = block.group(1).decode(), block.group(2), block.group(3).decode()
        if end != label:
            return labels, f"{entry} block {index}: BEGIN {label!r} ends with END {end!r}"
        body = _WHITESPACE.sub(b"", body)
        # DER starts with a SEQUENCE (0x30), which base64 spells `M`: the cheapest sign the body is DER at all.
        if not _BASE64.fullmatch(body) or len(body) % 4 or not body.startswith(b"M"):
            return labels, f"{entry} block {index} ({label}): not base64 DER"
        labels.append(label)
    return labels, ""


def certificate_problem(secret: TlsSecret) -> str:
    """Return why `secret` is not a TLS certificate and key Envoy can serve, as far as its PEM shows; empty when
    it is.

    `tls.crt` must hold one or more CERTIFICATE blocks (the chain, leaf first) and nothing else in PEM; `tls.key`
    exactly one unencrypted private key block (`KEY_LABELS`).
    """
    labels, problem = _blocks(secret.cert_chain_pem, "tls.crt")
    if problem:
        return problem
    if not labels:
        return "tls.crt holds no PEM CERTIFICATE block"
    others = sorted({label for label in labels if label != CERTIFICATE_LABEL})
    if others:
        return f"tls.crt must hold only CERTIFICATE blocks (got {others})"
    labels, problem = _blocks(secret.private_key.secret, "tls.key")
    if problem:
        return problem
    keys = [label for label in labels if label in KEY_LABELS]
    if len(keys) != 1 or len(labels) != 1:
        return (
            f"tls.key must hold exactly one PEM private key block ({', '.join(KEY_LABELS)}); "
            f"got {labels or 'none'}"
        )
    return ""
