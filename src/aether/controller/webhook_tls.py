"""The webhooks' serving certificate: from files (a mounted Secret), or generated once for every replica.

Generated mode: a self-signed CA and a serving certificate for the controller's Service names, made with
`cryptography`. Every replica must present a certificate of one CA (the API server trusts the one caBundle of each
webhook configuration), so the pair lives in the Secret `aether-system/aether-controller-webhook-tls`: the first
replica creates it, the others (and restarts) read it (a 409 AlreadyExists means another replica won). Then each
replica writes that CA into the caBundle of our webhook configurations, by name (`WEBHOOK_CONFIGURATIONS`), only
where it differs; a write that conflicts is retried on a fresh read.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
import ssl
import tempfile
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aether.kube.access import MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS
from aether.kube.api import KubeClient
from aether.kube.errors import ApiStatusError
from aether.kube.resources import SECRETS, JsonObject, ResourceType

__all__ = [
    "MUTATING_CONFIGURATIONS",
    "SERVING_SECRET",
    "VALIDATING_CONFIGURATIONS",
    "ServingCertificate",
    "TlsFilesInvalid",
    "ensure_ca_bundles",
    "generate_serving_certificate",
    "load_serving_certificate",
    "serving_certificate_from_secret",
]

LOG = logging.getLogger("aether.controller.webhooks")

SERVING_SECRET = ("aether-system", "aether-controller-webhook-tls")
"""The Secret holding the generated pair (the Deployment mounts it, optional, at /etc/aether/webhook-tls)."""
SERVICE = ("aether-system", "aether-controller")
"""The Service the webhook configurations name: the certificate's DNS names are its."""

VALIDATING_CONFIGURATIONS = ("aether-validation",)
MUTATING_CONFIGURATIONS = ("aether-pod-mutation",)
_CONFLICT_RETRIES = 5
_VALIDITY = datetime.timedelta(days=3650)


class TlsFilesInvalid(ValueError):
    """The certificate and key files (or Secret) are not a TLS pair: `what` names them, `problem` says why."""

    def __init__(self, what: str, problem: str) -> None:
        super().__init__(what, problem)
        self.what = what
        self.problem = problem

    def __str__(self) -> str:
        return f"webhook serving certificate {self.what}: {self.problem}"


@attrs.frozen(kw_only=True)
class ServingCertificate:
    """A serving certificate chain and key (PEM), and the CA (PEM) that clients trust ("" when not known)."""

    certificate_pem: bytes
    key_pem: bytes
    ca_pem: bytes = b""

    def server_context(self, *, what: str = "") -> ssl.SSLContext:
        """A TLS 1.2+ server context presenting this pair.

        Raises:
            TlsFilesInvalid: The PEM is not a certificate, or the key does not match it.
        """
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # ssl loads chains from files only: a private temporary directory, removed at once.
        with tempfile.TemporaryDirectory(prefix="aether-webhook-tls-") as directory:
            cert_file, key_file = Path(directory, "tls.crt"), Path(directory, "tls.key")
            cert_file.write_bytes(self.certificate_pem)
            key_file.touch(mode=0o600)
            key_file.write_bytes(self.key_pem)
            try:
                context.load_cert_chain(cert_file, key_file)
            except (ssl.SSLError, OSError) as error:
                raise TlsFilesInvalid(
                    what or "pair", f"not a PEM certificate and matching key ({error})"
                ) from error
        return context


def load_serving_certificate(cert_file: Path, key_file: Path) -> ServingCertificate:
    """Read a mounted pair (`tls.crt`, `tls.key`) and check that it serves.

    Raises:
        TlsFilesInvalid: A file is missing or unreadable, or the two are not a pair.
    """
    what = f"{str(cert_file)!r} and {str(key_file)!r}"
    try:
        pair = ServingCertificate(certificate_pem=cert_file.read_bytes(), key_pem=key_file.read_bytes())
    except OSError as error:
        raise TlsFilesInvalid(what, f"cannot be read ({error})") from error
    pair.server_context(what=what)
    return pair


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def service_dns_names(namespace: str, name: str) -> tuple[str, ...]:
    """The names the API server verifies a Service's webhook certificate against."""
    return (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local")


def generate_serving_certificate(
    *, now: datetime.datetime, dns_names: tuple[str, ...] = service_dns_names(*SERVICE)
) -> ServingCertificate:
    """A new self-signed CA (P-256) and a serving certificate it signs for `dns_names` (and 127.0.0.1)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("aether-controller-webhook-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        certificate_pem=leaf.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
    )


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _secret_of(pair: ServingCertificate) -> JsonObject:
    namespace, name = SERVING_SECRET
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "aether-controller"},
        },
        "type": "kubernetes.io/tls",
        "data": {
            "ca.crt": _base64(pair.ca_pem),
            "tls.crt": _base64(pair.certificate_pem),
            "tls.key": _base64(pair.key_pem),
        },
    }


def serving_certificate_from_secret(secret: JsonObject) -> ServingCertificate:
    """Read the pair from a `kubernetes.io/tls` Secret with `ca.crt`.

    Raises:
        TlsFilesInvalid: A key is missing or not base64, or the pair does not serve.
    """
    namespace, name = SERVING_SECRET
    what = f"Secret {namespace}/{name}"
    data = secret.get("data")
    if not isinstance(data, dict):
        raise TlsFilesInvalid(what, "data: must be an object with tls.crt, tls.key and ca.crt")
    values: dict[str, bytes] = {}
    for key in ("tls.crt", "tls.key", "ca.crt"):
        try:
            values[key] = base64.b64decode(str(data[key]), validate=True)
        except (KeyError, ValueError) as error:
            raise TlsFilesInvalid(what, f"data.{key}: must be base64 PEM ({error!r})") from None
    pair = ServingCertificate(
        certificate_pem=values["tls.crt"], key_pem=values["tls.key"], ca_pem=values["ca.crt"]
    )
    pair.server_context(what=what)
    return pair


async def shared_serving_certificate(client: KubeClient, *, now: datetime.datetime) -> ServingCertificate:
    """The replicas' one generated pair: the Secret's, or a new one this replica stores there first.

    Raises:
        TlsFilesInvalid: The Secret exists but does not hold a serving pair (delete it to have it made again).
        KubeError: The API refused or could not be reached.
    """
    namespace, name = SERVING_SECRET
    try:
        return serving_certificate_from_secret(await client.get(SECRETS, name=name, namespace=namespace))
    except ApiStatusError as error:
        if error.code != 404:
            raise
    pair = generate_serving_certificate(now=now)
    try:
        await client.create(SECRETS, _secret_of(pair), namespace=namespace)
    except ApiStatusError as error:
        if error.code != 409:
            raise
        # Another replica stored its pair first: serve that one.
        return serving_certificate_from_secret(await client.get(SECRETS, name=name, namespace=namespace))
    LOG.info("generated the webhook serving certificate into Secret %s/%s", namespace, name)
    return pair


async def _ensure_ca_bundle(client: KubeClient, resource: ResourceType, name: str, bundle: str) -> bool:
    for _ in range(_CONFLICT_RETRIES):
        try:
            configuration = await client.get(resource, name=name)
        except ApiStatusError as error:
            if error.code == 404:
                LOG.warning(
                    "%s %s not found: its caBundle cannot be written (apply webhooks.yaml)",
                    resource.kind,
                    name,
                )
                return False
            raise
        webhooks = configuration.get("webhooks") or []
        stale = [hook for hook in webhooks if (hook.get("clientConfig") or {}).get("caBundle") != bundle]
        if not stale:
            return False
        for hook in stale:
            hook.setdefault("clientConfig", {})["caBundle"] = bundle
        try:
            await client.replace(resource, configuration)
        except ApiStatusError as error:
            if error.code != 409:
                raise
            continue
        LOG.info("wrote the caBundle of %s %s (%d webhooks)", resource.kind, name, len(stale))
        return True
    LOG.warning(
        "%s %s: caBundle not written after %d conflicts; next start tries again",
        resource.kind,
        name,
        _CONFLICT_RETRIES,
    )
    return False


async def ensure_ca_bundles(client: KubeClient, ca_pem: bytes) -> int:
    """Write `ca_pem` into every webhook's caBundle of our configurations where it differs; return how many
    configurations were written."""
    bundle = base64.b64encode(ca_pem).decode("ascii")
    written = 0
    for resource, names in (
        (VALIDATING_WEBHOOK_CONFIGURATIONS, VALIDATING_CONFIGURATIONS),
        (MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_CONFIGURATIONS),
    ):
        for name in names:
            written += await _ensure_ca_bundle(client, resource, name, bundle)
    return written
