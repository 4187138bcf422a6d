"""The structural check of a listener's certificate Secret (`aether.core.gateway.certificates`)."""

from __future__ import annotations

import pytest

from aether.core.gateway.certificates import certificate_problem
from aether.testing import make_tls_secret


def _pem(label: str, body: str = "MIIB") -> bytes:
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n".encode()


def test_a_pem_certificate_chain_and_one_private_key_pass() -> None:
    """A chain of CERTIFICATE blocks (text around them allowed) and one key block of any kind Envoy loads pass."""
    chain = b"subject=leaf\n" + _pem("CERTIFICATE", "MIIBCgoK\nMIIB") + _pem("CERTIFICATE")
    for label in ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"):
        assert certificate_problem(make_tls_secret(cert_chain_pem=chain, private_key=_pem(label))) == ""


@pytest.mark.parametrize(
    ("chain", "key", "problem"),
    [
        (b"foo\n", _pem("PRIVATE KEY"), "tls.crt holds no PEM CERTIFICATE block"),
        (
            _pem("CERTIFICATE", "Zm9v"),
            _pem("PRIVATE KEY"),
            "tls.crt block 1 (CERTIFICATE): not base64 DER",
        ),
        (
            _pem("CERTIFICATE") + _pem("CERTIFICATE", "MII*"),
            _pem("PRIVATE KEY"),
            "tls.crt block 2 (CERTIFICATE): not base64 DER",
        ),
        (
            b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END PRIVATE KEY-----\n",
            _pem("PRIVATE KEY"),
            "tls.crt block 1: BEGIN 'CERTIFICATE' ends with END 'PRIVATE KEY'",
        ),
        (
            _pem("CERTIFICATE") + _pem("PRIVATE KEY"),
            _pem("PRIVATE KEY"),
            "tls.crt must hold only CERTIFICATE blocks (got ['PRIVATE KEY'])",
        ),
        (
            _pem("CERTIFICATE"),
            b"bar\n",
            "tls.key must hold exactly one PEM private key block (PRIVATE KEY, RSA PRIVATE KEY, EC PRIVATE KEY); "
            "got none",
        ),
        (
            _pem("CERTIFICATE"),
            _pem("ENCRYPTED PRIVATE KEY"),
            "tls.key must hold exactly one PEM private key block (PRIVATE KEY, RSA PRIVATE KEY, EC PRIVATE KEY); "
            "got ['ENCRYPTED PRIVATE KEY']",
        ),
        (
            _pem("CERTIFICATE"),
            _pem("PRIVATE KEY") + _pem("PRIVATE KEY"),
            "tls.key must hold exactly one PEM private key block (PRIVATE KEY, RSA PRIVATE KEY, EC PRIVATE KEY); "
            "got ['PRIVATE KEY', 'PRIVATE KEY']",
        ),
        (_pem("CERTIFICATE"), _pem("PRIVATE KEY", "MIIE="), "tls.key block 1 (PRIVATE KEY): not base64 DER"),
    ],
)
def test_a_secret_that_is_not_a_pem_certificate_and_key_says_why(
    chain: bytes, key: bytes, problem: str
) -> None:
    """Text that is not PEM, a body that is not base64 DER, mismatched armour, a key in the chain, and a key entry
    without exactly one unencrypted key are each named."""
    assert certificate_problem(make_tls_secret(cert_chain_pem=chain, private_key=key)) == problem
