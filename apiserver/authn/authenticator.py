"""The delegating authenticator: front-proxy headers, then x509 client certificate, then token.

Like kube-apiserver's delegating authenticator (k8s.io/apiserver authenticatorfactory):

1. Request headers (X-Remote-User, ...) count only on a connection whose client certificate
   was issued by a request-header CA, allows client authentication and, if allowed names are
   configured, has one of them as its Common Name.
2. Otherwise a client certificate issued by the client CA authenticates as CN, groups O.
3. Otherwise a bearer token is checked with a TokenReview.

Every authenticated user gets the group system:authenticated. Credentials that fail every
applicable step raise `AuthenticationFailed` (401); a request without credentials is anonymous.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apiserver.authn.tokenreview import TokenReviewer
from apiserver.authn.trust import TrustMaterial, TrustStore
from apiserver.authn.user import UserInfo, anonymous, with_authenticated_group

Headers = Sequence[tuple[bytes, bytes]]

# Stripped even before trust material names them, so handlers never see forged identity headers.
DEFAULT_IDENTITY_HEADERS = ("x-remote-user", "x-remote-uid", "x-remote-group")
DEFAULT_EXTRA_PREFIXES = ("x-remote-extra-",)


class AuthenticationFailed(Exception):
    """Credentials were presented and none of them authenticated (401)."""


class TrustNotLoaded(Exception):
    """The trust material has not been loaded yet, so nobody can be authenticated (503)."""


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Authenticator:
    def __init__(self, trust: TrustStore, tokens: TokenReviewer,
                 clock: Callable[[], datetime.datetime] = _utcnow):
        self._trust = trust
        self._tokens = tokens
        self._clock = clock

    async def authenticate(self, headers: Headers, client_cert_der: bytes | None) -> UserInfo:
        """The request's user. Raises AuthenticationFailed, TrustNotLoaded, or, when a
        TokenReview gets no answer, KubeUnavailable or KubeRejected."""
        material = self._trust.material
        if material is None:
            raise TrustNotLoaded()
        failures: list[str] = []
        if client_cert_der is not None:
            try:
                cert = x509.load_der_x509_certificate(client_cert_der)
            except ValueError as error:
                raise AuthenticationFailed(f"client certificate unreadable: {error}") from None
            user = self._front_proxy_user(cert, headers, material, failures)
            if user is None:
                user = self._client_cert_user(cert, material, failures)
            if user is not None:
                return with_authenticated_group(user)
        token = bearer_token(headers)
        if token is not None:
            user = await self._tokens.review(token)
            if user is not None:
                return with_authenticated_group(user)
            failures.append("invalid bearer token")
        if failures:
            raise AuthenticationFailed("; ".join(failures))
        return anonymous()

    def strip_identity_headers(self, headers: Headers) -> list[tuple[bytes, bytes]]:
        """`headers` without Authorization and the request-header identity headers."""
        material = self._trust.material or TrustMaterial()
        names = {"authorization", *DEFAULT_IDENTITY_HEADERS, *material.username_headers,
                 *material.uid_headers, *material.group_headers}
        prefixes = (*DEFAULT_EXTRA_PREFIXES, *material.extra_header_prefixes)
        return [
            (name, value) for name, value in headers
            if (text := name.decode("latin-1").lower()) not in names
            and not text.startswith(prefixes)
        ]

    def _front_proxy_user(self, cert: x509.Certificate, headers: Headers,
                          material: TrustMaterial, failures: list[str]) -> UserInfo | None:
        if not material.requestheader_cas or not material.username_headers:
            return None
        problem = _verify_client_cert(cert, material.requestheader_cas, self._clock())
        if problem is not None:
            # Not a front proxy: maybe a client certificate (step 2). No failure recorded here.
            return None
        common_name = _common_name(cert)
        if material.allowed_names and common_name not in material.allowed_names:
            failures.append(f"front-proxy certificate CN {common_name!r} is not an allowed name")
            return None
        values = _header_values(headers)
        name = _first(values, material.username_headers)
        if not name:
            return None
        return UserInfo(
            name=name,
            uid=_first(values, material.uid_headers),
            groups=[v for h in material.group_headers for v in values.get(h, []) if v],
            extra=_extra(values, material.extra_header_prefixes),
        )

    def _client_cert_user(self, cert: x509.Certificate, material: TrustMaterial,
                          failures: list[str]) -> UserInfo | None:
        problem = _verify_client_cert(cert, material.client_cas, self._clock())
        if problem is not None:
            failures.append(f"client certificate: {problem}")
            return None
        common_name = _common_name(cert)
        if not common_name:
            return None
        organizations = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        return UserInfo(name=common_name, groups=[str(o.value) for o in organizations])


def bearer_token(headers: Headers) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    for name, value in headers:
        if name.lower() == b"authorization":
            parts = value.decode("utf-8", errors="replace").strip().split(" ")
            if len(parts) >= 2 and parts[0].lower() == "bearer" and parts[1]:
                return parts[1]
            return None
    return None


def _verify_client_cert(cert: x509.Certificate, cas: Sequence[x509.Certificate],
                        now: datetime.datetime) -> str | None:
    """Why `cert` is not a valid client certificate directly issued by one of `cas`, or None."""
    if not cas:
        return "no CA configured to verify it"
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return "outside its validity period"
    if not _allows_client_auth(cert):
        return "not valid for client authentication (extended key usage)"
    for ca in cas:
        if not ca.not_valid_before_utc <= now <= ca.not_valid_after_utc:
            continue
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return None
    return "not issued by a trusted CA"


def _allows_client_auth(cert: x509.Certificate) -> bool:
    """As in Go's crypto/x509: no extended key usage extension allows any usage."""
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return (ExtendedKeyUsageOID.CLIENT_AUTH in usages
            or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages)


def _common_name(cert: x509.Certificate) -> str:
    """The subject's CN as Go reads it (crypto/x509/pkix FillFromRDNSequence): the LAST CN
    attribute, so a certificate with two CNs names the user kube-apiserver would name."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[-1].value) if names else ""


def _header_values(headers: Headers) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for name, value in headers:
        values.setdefault(name.decode("latin-1").lower(), []).append(
            value.decode("utf-8", errors="replace"))
    return values


def _first(values: dict[str, list[str]], names: Sequence[str]) -> str:
    """The first value of the first named header that has a non-empty one (Go: Header.Get)."""
    for name in names:
        found = values.get(name)
        if found and found[0]:
            return found[0]
    return ""


def _extra(values: dict[str, list[str]], prefixes: Sequence[str]) -> dict[str, list[str]]:
    extra: dict[str, list[str]] = {}
    for name, header_values in values.items():
        for prefix in prefixes:
            if name.startswith(prefix):
                key = unquote(name[len(prefix):])
                extra.setdefault(key, []).extend(header_values)
    return extra
