"""The serving pair in --cert-dir, written so the TLS layer never reads half a file."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from certs.authority import KeyPair

log = logging.getLogger(__name__)

CERT_FILE, KEY_FILE = "tls.crt", "tls.key"


def _write_atomically(path: Path, content: bytes, mode: int) -> None:
    """Write a temporary file beside `path` (created with `mode`), flush it to disk and rename
    it over `path`: a reader sees the old file or the new one, never a part."""
    temporary = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


class CertDir:
    """`tls.crt` and `tls.key` (mode 0600) in `directory`, which is created if missing."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.cert_file = directory / CERT_FILE
        self.key_file = directory / KEY_FILE

    def _holds(self, pair: KeyPair) -> bool:
        try:
            return (self.cert_file.read_bytes() == pair.cert_pem()
                    and self.key_file.read_bytes() == pair.key_pem())
        except OSError:
            return False

    def write(self, pair: KeyPair) -> bool:
        """Write `pair` unless the files hold it already; True if they were written. The key
        is written first: the TLS layer, which reloads when either file changes, keeps its
        previous certificate while the two do not match, and loads the pair once the
        certificate follows."""
        if self._holds(pair):
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(self.key_file, pair.key_pem(), 0o600)
        _write_atomically(self.cert_file, pair.cert_pem(), 0o644)
        log.info("serving certificate written", extra={
            "cert_file": str(self.cert_file), "serial": format(pair.cert.serial_number, "x"),
            "not_after": pair.cert.not_valid_after_utc.isoformat()})
        return True
