"""Server options, as parsed from the command line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration such as ``10s``, ``1m30s`` or ``500ms`` (``0`` allowed)."""
    if text == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}: use e.g. 10s, 1m30s or 500ms")
    return total


@dataclass(frozen=True)
class ServerOptions:
    tls_cert_file: Path
    tls_private_key_file: Path
    bind_address: str = "0.0.0.0"
    secure_port: int = 8443
    kubeconfig: Path | None = None
    """None: use the in-cluster service account."""
    authentication_token_cache_ttl: float = 10.0
    authorization_allowed_cache_ttl: float = 10.0
    authorization_denied_cache_ttl: float = 10.0
    log_level: str = "info"
    data_dir: Path = Path("/var/lib/container-notifier")
    max_records_per_pod: int = 10
    max_timeout_seconds: int = 600
    default_ttl_seconds_after_finished: int = 3600
    max_concurrent_executions: int = 64
    output_tail_bytes: int = 4096
    max_notification_parallelism: int = 100
