"""Media types the API reads and writes, and parsing of the Accept header."""

from __future__ import annotations

from dataclasses import dataclass

JSON_MEDIA_TYPE = "application/json"
YAML_MEDIA_TYPE = "application/yaml"
BODY_MEDIA_TYPES = (JSON_MEDIA_TYPE, YAML_MEDIA_TYPE)
"""What a create body may be, as in kube-apiserver (YAML is converted to JSON first)."""


@dataclass(frozen=True)
class MediaRange:
    type: str
    """e.g. ``application/json``, ``*/*``."""
    params: dict[str, str]
    """Parameters other than q."""
    quality: float


def parse_accept(accept: str) -> list[MediaRange]:
    """The header's media ranges, best quality first (stable for equal quality)."""
    ranges = []
    for media_range in accept.split(","):
        kind, *raw_params = (part.strip() for part in media_range.split(";"))
        params = dict(p.split("=", 1) for p in raw_params if "=" in p)
        try:
            quality = float(params.pop("q", "1"))
        except ValueError:
            quality = 1.0
        ranges.append(MediaRange(kind.lower(), params, quality))
    return sorted(ranges, key=lambda r: -r.quality)


def is_plain_json(media_range: MediaRange) -> bool:
    """Whether the range accepts plain application/json."""
    return (media_range.type in (JSON_MEDIA_TYPE, "application/*", "*/*")
            and not media_range.params and media_range.quality > 0)
