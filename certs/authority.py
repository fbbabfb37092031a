"""Create certificate authorities and issue serving and client certificates.

Keys are ECDSA P-256: small, fast to generate, and accepted by kube-apiserver, etcd and
Python's ssl.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY = datetime.timedelta(days=365)
DEFAULT_BACKDATE = datetime.timedelta(minutes=5)
"""How far before its issue a certificate's notBefore is set, so that a peer whose clock is a
little behind accepts it at once."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write the certificate and key as PEM; the key file is readable by its owner only."""
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        key_path.parent.mkdir(parents=True, exist_ok=True)
        cert_path.write_bytes(self.cert_pem())
        key_path.touch(mode=0o600, exist_ok=True)
        key_path.write_bytes(self.key_pem())

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> KeyPair:
        try:
            return cls.from_pem(cert_path.read_bytes(), key_path.read_bytes())
        except ValueError as error:
            raise ValueError(f"{key_path}: {error}") from None

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> KeyPair:
        """The pair of a PEM certificate and its PEM (unencrypted ECDSA) key; ValueError if
        either is malformed, the key is not ECDSA, or it is not the certificate's key."""
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"expected an ECDSA private key, got {type(key).__name__}")
        if key.public_key() != cert.public_key():
            raise ValueError("the private key is not the certificate's")
        return cls(cert, key)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_ca(common_name: str, validity: datetime.timedelta = DEFAULT_VALIDITY, *,
           now: datetime.datetime | None = None,
           backdate: datetime.timedelta = DEFAULT_BACKDATE) -> KeyPair:
    """A self-signed CA certificate that may sign leaf certificates only, valid from `backdate`
    before `now` (default: the current time) until `validity` after it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    now = now or _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def issue(
    ca: KeyPair,
    common_name: str,
    *,
    organizations: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
    validity: datetime.timedelta = DEFAULT_VALIDITY,
    now: datetime.datetime | None = None,
    backdate: datetime.timedelta = DEFAULT_BACKDATE,
    not_after: datetime.datetime | None = None,
) -> KeyPair:
    """Issue a leaf certificate signed by `ca`, valid from `backdate` before `now` (default:
    the current time) until `validity` after it, or until `not_after` if that is earlier.

    `server` adds the serverAuth extended key usage, `client` adds clientAuth; Kubernetes reads a
    client certificate's CN as the user name and each O as a group.
    """
    if not (server or client):
        raise ValueError(f"certificate {common_name!r}: set server=True, client=True or both")
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or _now()
    end = now + validity if not_after is None else min(now + validity, not_after)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def load_or_create_ca(directory: Path, stem: str, common_name: str) -> KeyPair:
    """Reuse `<stem>.crt`/`<stem>.key` in `directory` if both exist, else create and write them."""
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    if cert_path.exists() and key_path.exists():
        return KeyPair.load(cert_path, key_path)
    ca = new_ca(common_name)
    ca.write(cert_path, key_path)
    return ca
