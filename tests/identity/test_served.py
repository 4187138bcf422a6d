"""The served-certificate judgement of `aether identity-ready --inbound` (`aether.identity.served`); the handshake
with a real Envoy is tested in tests/integration/test_spiffe_mesh.py."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from aether.cli import identity_ready_command, main
from aether.cli.identity_ready_command import inbound_address
from aether.core.project.names import MESH_INBOUND_PORT
from aether.identity.mint import MintedSvid, TestCA
from aether.identity.served import served_certificate_problem

TD = "example.org"
NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
HOUR = 3600 * 10**9
NOW_NS = int(NOW.timestamp()) * 10**9


def _der(svid: MintedSvid) -> bytes:
    leaf = x509.load_pem_x509_certificates(svid.cert_chain_pem)[0]
    return leaf.public_bytes(serialization.Encoding.DER)


def _problem(svid: MintedSvid, *, trust_domain: str = "") -> str | None:
    return served_certificate_problem(
        _der(svid), namespace="shop", service_account="cart", trust_domain=trust_domain, now=NOW
    )


def test_the_pods_svid_valid_now_is_served() -> None:
    ca = TestCA(TD)
    svid = ca.issue(f"spiffe://{TD}/ns/shop/sa/cart", not_before=NOW_NS - HOUR, not_after=NOW_NS + HOUR)
    assert _problem(svid) is None
    assert _problem(svid, trust_domain=TD) is None


@pytest.mark.parametrize(
    ("spiffe_id", "trust_domain", "reason"),
    [
        (
            "spiffe://example.org/ns/shop/sa/web",
            "",
            "names 'spiffe://example.org/ns/shop/sa/web', not 'spiffe://<trust domain>/ns/shop/sa/cart'",
        ),
        ("spiffe://example.org/ns/shop/sa/cart/extra", "", "not 'spiffe://<trust domain>/ns/shop/sa/cart'"),
        (
            "spiffe://example.org/ns/shop/sa/cart",
            "other.example",
            "not 'spiffe://other.example/ns/shop/sa/cart'",
        ),
    ],
)
def test_another_identity_is_named_with_the_one_wanted(
    spiffe_id: str, trust_domain: str, reason: str
) -> None:
    ca = TestCA(TD)
    svid = ca.issue(spiffe_id, not_before=NOW_NS - HOUR, not_after=NOW_NS + HOUR)
    problem = _problem(svid, trust_domain=trust_domain)
    assert problem is not None
    assert reason in problem


def test_an_svid_outside_its_validity_is_not_served() -> None:
    ca = TestCA(TD)
    wanted = f"spiffe://{TD}/ns/shop/sa/cart"
    expired = ca.issue(wanted, not_before=NOW_NS - 2 * HOUR, not_after=NOW_NS - HOUR)
    early = ca.issue(wanted, not_before=NOW_NS + HOUR, not_after=NOW_NS + 2 * HOUR)
    assert "expired at" in (_problem(expired) or "")
    assert "is not valid yet" in (_problem(early) or "")


def test_garbage_is_a_reason_not_a_crash() -> None:
    problem = served_certificate_problem(b"\x30\x03junk", namespace="shop", service_account="cart", now=NOW)
    assert problem is not None
    assert "does not parse" in problem


def test_the_inbound_address_defaults_to_the_pod_ip_and_the_mesh_inbound() -> None:
    assert identity_ready_command.MESH_INBOUND_PORT == MESH_INBOUND_PORT
    assert inbound_address("", environ={"POD_IP": "10.1.2.3"}) == ("10.1.2.3", MESH_INBOUND_PORT)
    assert inbound_address("", environ={}) == ("127.0.0.1", MESH_INBOUND_PORT)
    assert inbound_address("127.0.0.9:18008") == ("127.0.0.9", 18008)
    assert inbound_address("[fd00::7]:9000") == ("fd00::7", 9000)
    for bad in ("10.0.0.1", ":18008", "host:0", "host:http"):
        with pytest.raises(ValueError, match="--inbound: expected HOST:PORT"):
            inbound_address(bad)


POD = ("--namespace", "shop", "--pod", "cart-1")
INBOUND = (*POD, "--inbound", "--service-account", "cart")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "give --namespace and --pod (or set POD_NAMESPACE and POD_NAME)"),
        ((*POD, "--inbound"), "give --service-account (or set POD_SERVICE_ACCOUNT) with --inbound"),
        (
            (*POD, "--inbound", "cart:http", "--service-account", "cart"),
            "--inbound: expected HOST:PORT such as 10.0.0.7:18008 (got 'cart:http')",
        ),
        (
            (*INBOUND, "--trust-domain", "Corp Mesh"),
            "--trust-domain: trust domain must be lowercase letters, digits, '.', '-' or '_' (got 'Corp Mesh')",
        ),
        (
            (*INBOUND, "--bundle", "/nonexistent/bundle.pem"),
            "--bundle: cannot read '/nonexistent/bundle.pem': No such file or directory",
        ),
    ],
    ids=["no pod", "no service account", "bad inbound", "bad trust domain", "missing bundle"],
)
def test_identity_ready_usage_errors_exit_2_naming_the_input(
    argv: tuple[str, ...],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bad input is a usage error (2) before any check, naming what is wrong; never a timeout (1)."""
    for variable in ("POD_NAMESPACE", "POD_NAME", "POD_SERVICE_ACCOUNT", "POD_IP"):
        monkeypatch.delenv(variable, raising=False)
    assert main(["identity-ready", *argv, "--timeout", "0"]) == 2
    assert message in capsys.readouterr().err
