from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from apiserver import jsonlog
from apiserver.__main__ import build_parser, options_from_args
from apiserver.config import ServerOptions, parse_duration
from apiserver.jsonlog import JSONFormatter


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("0", 0.0), ("1.5s", 1.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "s", "10x", "1m 30s", "-1s", "10s5"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_defaults():
    args = build_parser().parse_args(["--tls-cert-file", "c", "--tls-private-key-file", "k"])
    assert options_from_args(args) == ServerOptions(tls_cert_file=Path("c"),
                                                    tls_private_key_file=Path("k"))


def test_flags():
    args = build_parser().parse_args([
        "--tls-cert-file", "c", "--tls-private-key-file", "k", "--bind-address", "127.0.0.1",
        "--secure-port", "9443", "--kubeconfig", "/kc", "--authentication-token-cache-ttl", "1m",
        "--authorization-allowed-cache-ttl", "5s", "--authorization-denied-cache-ttl", "0",
        "--log-level", "debug",
    ])
    assert options_from_args(args) == ServerOptions(
        tls_cert_file=Path("c"), tls_private_key_file=Path("k"), bind_address="127.0.0.1",
        secure_port=9443, kubeconfig=Path("/kc"), authentication_token_cache_ttl=60.0,
        authorization_allowed_cache_ttl=5.0, authorization_denied_cache_ttl=0.0,
        log_level="debug")


def test_bad_duration_flag_exits(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--tls-cert-file", "c", "--tls-private-key-file", "k",
                                   "--authorization-allowed-cache-ttl", "10"])
    assert "invalid duration" in capsys.readouterr().err


def test_json_log_line_has_time_level_msg_and_fields():
    record = logging.LogRecord("apiserver.x", logging.WARNING, __file__, 1, "hello %s",
                               ("world",), None)
    record.user = "alice"
    line = json.loads(JSONFormatter().format(record))
    assert line["msg"] == "hello world"
    assert line["level"] == "warning"
    assert line["user"] == "alice"
    assert line["time"].endswith("Z")
    assert set(line) == {"time", "level", "msg", "logger", "user"}


@pytest.fixture
def restore_logging():
    root, httpx_logger = logging.getLogger(), logging.getLogger("httpx")
    saved = (root.handlers[:], root.level, httpx_logger.level)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    httpx_logger.setLevel(saved[2])


@pytest.mark.usefixtures("restore_logging")
def test_configure_writes_json_lines_to_stderr(capsys):
    jsonlog.configure("info")
    logging.getLogger("apiserver.test").debug("hidden")
    logging.getLogger("uvicorn.error").info("from uvicorn", extra={"port": 1})
    logging.getLogger("httpx").info("HTTP Request: GET https://kube/api")
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ["from uvicorn"]
    assert json.loads(lines[0])["port"] == 1
    jsonlog.configure("debug")
    logging.getLogger("httpx").info("HTTP Request: GET https://kube/api")
    assert "HTTP Request" in capsys.readouterr().err
