"""The ``http`` action of a notifier declaration: an HTTP request to the pod's own IP.

    {"name": "reload", "action": {"http": {"method": "POST", "port": "web",
                                           "path": "/-/reload"}}}

The request always goes to the pod's IP (``status.podIP``) on the declared port: there is no
host field, redirects are not followed and no proxy is used, so a declaration cannot make the
server reach any other address. HTTPS is not verified, as Kubernetes' probes do not verify it
(the pod's own IP has no name a certificate could be checked against). ``port`` is a number or
the name of one of the container's ``ports``, resolved when the pod's declarations are read.

What a declaration may hold is bounded (headers, path and body), and what the server sets
itself (``Host``, ``Content-Length``, the hop-by-hop headers) cannot be declared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from apiserver.api.model import APIModel, Check, Invalid, OneOf, Problem, Required, invalid

METHODS = ("GET", "POST", "PUT")
SCHEMES = ("HTTP", "HTTPS")
DEFAULT_SCHEME = "HTTP"
DEFAULT_PATH = "/"
MAX_PATH_CHARS = 2048
MAX_HEADERS = 32
MAX_HEADER_NAME_CHARS = 256
MAX_HEADER_VALUE_CHARS = 4096
MAX_BODY_BYTES = 16384
"""The largest request body a declaration may carry (UTF-8 bytes)."""
MAX_PORT = 65535

RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection",
                              "keep-alive", "upgrade", "te", "trailer"})
"""Headers the server sets itself (the target, the body's framing) or that are hop-by-hop;
``Proxy-*`` headers are refused as well: the request goes through no proxy."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP field name (RFC 9110 section 5.6.2 token)."""
_FIELD_VALUE = re.compile(r"[\x21-\x7e]([\t\x20-\x7e]*[\x21-\x7e])?")
"""An HTTP field value of visible ASCII, inner spaces and tabs (RFC 9110 section 5.5), no
leading or trailing whitespace; empty values are allowed separately."""
_PATH = re.compile(r"/[\x21-\x22\x24-\x7e]*")
"""An absolute path with an optional query: visible ASCII, no ``#`` (fragments are not sent)."""
_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
"""An IANA service name, as a container port's ``name`` (at most 15 characters, a letter)."""


@dataclass(frozen=True)
class HttpAction:
    """An HTTP request to the pod's IP. ``port`` is resolved to a number when the pod's
    containers are known (a named port stays a name only where they are not)."""

    method: str
    port: int | str
    path: str = DEFAULT_PATH
    scheme: str = DEFAULT_SCHEME
    headers: tuple[tuple[str, str], ...] = ()
    body: str | None = None


def port_problems(value: int | str) -> Iterable[Problem]:
    if isinstance(value, int):
        if not 1 <= value <= MAX_PORT:
            yield invalid(f"must be between 1 and {MAX_PORT}, inclusive, or the name of one of "
                          "the container's ports")
    elif len(value) > 15 or not _PORT_NAME.fullmatch(value) or "--" in value or not any(
            c.isalpha() for c in value):
        yield invalid("must be a port number or the name of one of the container's ports (an "
                      "IANA service name: at most 15 lowercase letters, digits and '-', with a "
                      "letter)")


def _path(value: str) -> Iterable[Problem]:
    if len(value) > MAX_PATH_CHARS:
        yield invalid(f"must be no more than {MAX_PATH_CHARS} characters")
    elif not _PATH.fullmatch(value):
        yield invalid("must be an absolute path starting with '/', with an optional query, of "
                      "visible ASCII characters (percent-encode others) and no '#'")


def _header_name(value: str) -> Iterable[Problem]:
    if len(value) > MAX_HEADER_NAME_CHARS:
        yield invalid(f"must be no more than {MAX_HEADER_NAME_CHARS} characters")
    elif not _TOKEN.fullmatch(value):
        yield invalid("must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)")
    elif value.lower() in RESERVED_HEADERS or value.lower().startswith("proxy-"):
        yield invalid("the server sets this header itself (or it is hop-by-hop); remove it")


def _header_value(value: str) -> Iterable[Problem]:
    if len(value) > MAX_HEADER_VALUE_CHARS:
        yield invalid(f"must be no more than {MAX_HEADER_VALUE_CHARS} characters")
    elif value and not _FIELD_VALUE.fullmatch(value):
        yield invalid("must be an HTTP header value: visible ASCII characters with inner "
                      "spaces, no line breaks or control characters, no leading or trailing "
                      "whitespace")


def _body(value: str) -> Iterable[Problem]:
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BODY_BYTES:
        yield invalid(f"must be no more than {MAX_BODY_BYTES} bytes (it is {size})",
                      value=f"{value[:32]}...")


def _headers(headers: list[HttpHeader]) -> Iterable[Problem]:
    if len(headers) > MAX_HEADERS:
        yield invalid(f"must have at most {MAX_HEADERS} headers (it has {len(headers)})",
                      value=len(headers))


Method = Annotated[str, OneOf(METHODS)]
Scheme = Annotated[str, OneOf(SCHEMES)]


class HttpHeader(APIModel):
    """A header of the request, as a probe's httpHeaders entry."""

    name: Annotated[str | None, Field(description="The header's name."), Check(_header_name),
                    Invalid("must be a string"), Required("give the header's name")] = None
    value: Annotated[str | None, Field(description="The header's value."),
                     Check(_header_value), Invalid("must be a string"),
                     Required("give the header's value (it may be empty)", empty=False)] = None


class HttpDeclaration(APIModel):
    """Send an HTTP request to the pod's own IP; a 2xx answer is success."""

    method: Annotated[Method | None, Field(description=f"One of {', '.join(METHODS)}."),
                      Required(f"give the method: one of {', '.join(METHODS)}")] = None
    port: Annotated[int | str | None, Field(
        description="The port: a number, or the name of one of the container's ports."),
        Check(port_problems), Invalid("must be a port number or a port name"),
        Required("give the port: a number, or the name of one of the container's ports",
                 empty=False)] = None
    path: Annotated[str | None, Field(
        description=f"The path and optional query; default {DEFAULT_PATH}."), Check(_path),
        Invalid("must be a string")] = None
    scheme: Annotated[Scheme | None, Field(
        description=f"HTTP or HTTPS (not verified, as probes do not verify it); default "
                    f"{DEFAULT_SCHEME}.")] = None
    http_headers: Annotated[list[HttpHeader] | None, Field(
        description=f"Headers to send, at most {MAX_HEADERS}."), Check(_headers),
        Invalid("must be a list of objects with name and value")] = None
    body: Annotated[str | None, Field(
        description=f"The request body (POST and PUT), at most {MAX_BODY_BYTES} bytes."),
        Check(_body), Invalid("must be a string")] = None

    def action(self) -> HttpAction:
        assert self.method is not None and self.port is not None
        headers = tuple((h.name or "", h.value or "") for h in self.http_headers or ())
        return HttpAction(self.method, self.port, self.path or DEFAULT_PATH,
                          self.scheme or DEFAULT_SCHEME, headers, self.body)


def http_rules(declaration: HttpDeclaration) -> Iterable[Problem]:
    """A GET has no body (checked here, so the path names the field as written)."""
    if declaration.body is not None and declaration.method == "GET":
        yield invalid("a GET request has no body; use POST or PUT, or remove body", at=".body",
                      value=f"{declaration.body[:32]}...")
