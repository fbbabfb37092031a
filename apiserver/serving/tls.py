"""The serving TLS context: certificate reloaded when its files change, client trust replaceable.

Python's ssl cannot ask for a client certificate without verifying it, so every connection
verifies an optional client certificate (CERT_OPTIONAL) against a bundle of both the client CA
and the request-header (front-proxy) CA; the authenticator then checks which CA issued it.

An SSLContext cannot drop CAs or be swapped under a listening socket, so each change builds a
fresh context and the listener's SNI callback (called for every handshake, with or without SNI)
moves the new connection onto the newest one. That switches the certificate and the trust store;
OpenSSL keeps the listener's verify mode, which is why every context uses CERT_OPTIONAL.
"""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

from cryptography import x509

from apiserver.errors import StartupError

log = logging.getLogger(__name__)

_FileStamp = tuple[tuple[int, int, int], ...]


class ServingCertificateUnusable(StartupError):
    """The serving certificate or key cannot be read or loaded at start."""


class ServingTLS:
    def __init__(self, cert_file: Path, key_file: Path):
        """Raises ServingCertificateUnusable if the files are not a readable PEM certificate
        and its private key (later reloads keep the previous certificate instead)."""
        self._cert_file = cert_file
        self._key_file = key_file
        self._client_trust = ""
        self._not_after = 0.0
        self._stamp = self._file_stamp()
        for flag, path, marker, what in (
                ("--tls-cert-file", cert_file, b"-----BEGIN CERTIFICATE-----", "certificate"),
                ("--tls-private-key-file", key_file, b"PRIVATE KEY-----", "private key")):
            try:
                pem = path.read_bytes()
            except OSError as error:
                raise ServingCertificateUnusable(
                    f"{flag}={path}: cannot read it ({error.strerror or error}): give a "
                    f"readable PEM {what}") from None
            if marker not in pem:
                raise ServingCertificateUnusable(
                    f"{flag}={path}: not a PEM {what}: give the PEM {what} file")
        try:
            self._current = self._build()
        except ssl.SSLError as error:
            raise ServingCertificateUnusable(
                f"--tls-cert-file={cert_file} with --tls-private-key-file={key_file} cannot be "
                f"loaded ({error.reason or error}): give the serving certificate (intermediates "
                "after it) and the key it was issued for") from None
        self.context: ssl.SSLContext = self._current
        """The context to listen with; new connections move to the newest context."""

    def expiration_timestamp(self) -> float:
        """The notAfter (Unix time) of the certificate new connections get, after reloading
        the files if they changed; 0 if it cannot be read."""
        self._reload_if_changed()
        return self._not_after

    def set_client_trust(self, pem_bundle: str) -> None:
        """Verify client certificates of new connections against `pem_bundle` (PEM CAs)."""
        if pem_bundle == self._client_trust:
            return
        context = self._build(pem_bundle)
        self._client_trust = pem_bundle
        self._current = context
        log.info("client certificate trust updated",
                 extra={"ca_certificates": pem_bundle.count("BEGIN CERTIFICATE")})

    def _build(self, client_trust: str | None = None) -> ssl.SSLContext:
        trust = self._client_trust if client_trust is None else client_trust
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._cert_file, self._key_file)
        self._not_after = _not_after(self._cert_file)
        context.verify_mode = ssl.CERT_OPTIONAL
        if trust:
            context.load_verify_locations(cadata=trust)
        context.sni_callback = self._select
        return context

    def _select(self, ssl_object: ssl.SSLObject, server_name: str | None,
                context: ssl.SSLContext) -> None:
        self._reload_if_changed()
        if ssl_object.context is not self._current:
            ssl_object.context = self._current

    def _reload_if_changed(self) -> None:
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._current = self._build()
        except (OSError, ssl.SSLError) as error:
            # Often a rotation caught between writing the certificate and the key: the next
            # change of either file retries.
            log.warning("serving certificate not reloaded; keeping the previous one",
                        extra={"cert_file": str(self._cert_file), "error": str(error)})
            return
        log.info("serving certificate reloaded", extra={"cert_file": str(self._cert_file)})

    def _file_stamp(self) -> _FileStamp | None:
        try:
            stats = [os.stat(path) for path in (self._cert_file, self._key_file)]
        except OSError:
            return None
        return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)


def _not_after(cert_file: Path) -> float:
    """The notAfter of the first certificate in `cert_file` (just loaded), or 0."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except (OSError, ValueError):
        return 0.0
    return cert.not_valid_after_utc.timestamp()
