from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
from pathlib import Path

import pytest

from apiserver import jsonlog
from apiserver.__main__ import build_parser
from apiserver.config import (
    InvalidOptions,
    ServerOptions,
    check,
    deprecation_warnings,
    flag_name,
    flag_of,
    format_duration,
    log_level,
    options_from_args,
    parse_duration,
    tls_files,
)
from apiserver.jsonlog import JSONFormatter
from apiserver.version import version

REQUIRED = ["--tls-cert-file", "c", "--tls-private-key-file", "k"]


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("0", 0.0), ("1.5s", 1.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "s", "10x", "1m 30s", "-1s", "10s5"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (10.0, "10s"), (0.0, "0"), (90.0, "90s"), (120.0, "2m"), (7200.0, "2h"), (0.5, "500ms"),
    (1.5, "1500ms"),
])
def test_format_duration_reads_back(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_every_option_has_exactly_one_flag():
    flags = {option for action in build_parser()._actions for option in action.option_strings}
    fields = dataclasses.fields(ServerOptions)
    aliases = {alias for field in fields for alias in flag_of(field).deprecated}
    assert aliases == {"--authentication-token-cache-ttl", "--authorization-allowed-cache-ttl",
                       "--authorization-denied-cache-ttl"}
    assert flags - {"-h", "--help", "--version", "-v"} - aliases == {
        flag_name(field) for field in fields}


@pytest.mark.parametrize(("alias", "flag", "field"), [
    ("--authentication-token-cache-ttl", "--authentication-token-webhook-cache-ttl",
     "authentication_token_webhook_cache_ttl"),
    ("--authorization-allowed-cache-ttl", "--authorization-webhook-cache-authorized-ttl",
     "authorization_webhook_cache_authorized_ttl"),
    ("--authorization-denied-cache-ttl", "--authorization-webhook-cache-unauthorized-ttl",
     "authorization_webhook_cache_unauthorized_ttl"),
])
def test_a_deprecated_alias_still_sets_its_option_and_is_warned_about(alias, flag, field):
    args = build_parser().parse_args([*REQUIRED, f"{alias}=42s"])
    assert getattr(options_from_args(args), field) == 42.0
    assert deprecation_warnings(args) == [
        f"Flag {alias} has been deprecated, use {flag} instead"]
    assert deprecation_warnings(build_parser().parse_args([*REQUIRED, flag, "42s"])) == []


def test_deprecated_aliases_are_hidden_from_help_but_named_by_their_flag(capsys, monkeypatch):
    lines = help_lines(capsys, monkeypatch)
    assert "--authentication-token-cache-ttl" not in lines
    assert ("(deprecated former name: --authentication-token-cache-ttl)"
            in lines["--authentication-token-webhook-cache-ttl"])


def test_version_prints_the_package_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"container-notifier {version()}\n"
    assert version() == importlib.metadata.version("container-notifier")


def test_version_falls_back_to_pyproject(monkeypatch, tmp_path):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "container-notifier"\nversion = "9.8.7"\n')
    assert version(pyproject) == "9.8.7"
    assert version(tmp_path / "missing.toml") == "unknown"


@pytest.mark.parametrize(("argv", "level"), [
    ([], "info"), (["--log-level", "warning"], "warning"), (["-v", "0"], "info"),
    (["-v=1"], "info"), (["-v2"], "debug"), (["--v=4"], "debug"),
    (["--log-level", "error", "--v", "2"], "debug"), (["--log-level", "debug", "-v", "0"], "info"),
])
def test_verbosity_as_klog_levels_wins_over_log_level(argv, level):
    assert log_level(options_from_args(build_parser().parse_args([*REQUIRED, *argv]))) == level


def test_a_field_without_a_flag_is_refused():
    @dataclasses.dataclass
    class Bare:
        x: int = 1

    with pytest.raises(TypeError, match=r"ServerOptions.x has no flag: declare it with option"):
        flag_of(dataclasses.fields(Bare)[0])


def test_defaults():
    args = build_parser().parse_args(REQUIRED)
    assert options_from_args(args) == ServerOptions(tls_cert_file=Path("c"),
                                                    tls_private_key_file=Path("k"))


def help_lines(capsys, monkeypatch) -> dict[str, str]:
    """Each flag of --help (its first spelling) and its line with the help under it, joined."""
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping inside a help text
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    options = capsys.readouterr().out.partition("\noptions:\n")[2]
    lines: dict[str, str] = {}
    for line in options.splitlines():
        if line.startswith("  -"):
            flag = line.split()[0].rstrip(",")
            lines[flag] = line
        else:
            lines[flag] += " " + line.strip()
    return lines


def test_help_shows_each_flag_with_its_default_as_typed(capsys, monkeypatch):
    lines = help_lines(capsys, monkeypatch)
    for field in dataclasses.fields(ServerOptions):
        flag = flag_of(field)
        line = lines[flag.short or flag_name(field)]
        assert flag.help in line
        if field.default is dataclasses.MISSING or field.default is None:
            assert "(default:" not in line
            continue
        shown = flag.show(field.default)
        assert flag.parse(shown) == field.default, field.name
        assert line.endswith(f"(default: {shown})")
    assert lines["--authentication-token-webhook-cache-ttl"].startswith(
        "  --authentication-token-webhook-cache-ttl DURATION ")
    assert lines["--authorization-webhook-cache-unauthorized-ttl"].endswith("(default: 10s)")
    assert lines["-v"].startswith("  -v N, --v N ")
    assert lines["--log-level"].startswith("  --log-level {debug,info,warning,error} ")


def test_every_flag_sets_its_option():
    args = build_parser().parse_args([
        "--tls-cert-file", "c", "--tls-private-key-file", "k", "--bind-address", "127.0.0.1",
        "--secure-port", "9443", "--kubeconfig", "/kc", "--authentication-kubeconfig", "/akc",
        "--authorization-kubeconfig", "/zkc", "--authentication-token-webhook-cache-ttl", "1m",
        "--authorization-webhook-cache-authorized-ttl", "5s",
        "--authorization-webhook-cache-unauthorized-ttl", "0",
        "--data-dir", "/d", "--storage", "sqlite", "--storage-namespace", "cn-storage",
        "--max-records-per-pod", "3",
        "--max-timeout-seconds", "60", "--max-hold-seconds", "900",
        "--max-grace-period-seconds", "120",
        "--default-ttl-seconds-after-finished", "120", "--max-concurrent-executions", "8",
        "--output-tail-bytes", "100", "--max-notification-parallelism", "7",
        "--shutdown-delay-duration", "3s",
        "--leader-elect-lease-duration", "30s", "--leader-elect-renew-deadline", "20s",
        "--leader-elect-retry-period", "4s", "--leader-elect-resource-name", "elect",
        "--leader-elect-resource-namespace", "ns", "--log-level", "debug", "--v", "3",
        "--cert-dir", "/certs", "--serving-cert-secret", "sec",
        "--serving-cert-secret-namespace", "sns", "--serving-cert-service", "svc",
        "--apiservice-name", "", "--serving-cert-validity", "20s",
        "--serving-cert-ca-validity", "1m",
    ])
    expected = ServerOptions(
        tls_cert_file=Path("c"), tls_private_key_file=Path("k"), bind_address="127.0.0.1",
        secure_port=9443, kubeconfig=Path("/kc"), authentication_kubeconfig=Path("/akc"),
        authorization_kubeconfig=Path("/zkc"), authentication_token_webhook_cache_ttl=60.0,
        authorization_webhook_cache_authorized_ttl=5.0,
        authorization_webhook_cache_unauthorized_ttl=0.0,
        data_dir=Path("/d"), storage="sqlite", storage_namespace="cn-storage",
        max_records_per_pod=3, max_timeout_seconds=60, max_hold_seconds=900,
        max_grace_period_seconds=120, default_ttl_seconds_after_finished=120,
        max_concurrent_executions=8,
        output_tail_bytes=100, max_notification_parallelism=7,
        shutdown_delay_duration=3.0,
        leader_elect_lease_duration=30.0, leader_elect_renew_deadline=20.0,
        leader_elect_retry_period=4.0, leader_elect_resource_name="elect",
        leader_elect_resource_namespace="ns", log_level="debug", v=3, cert_dir=Path("/certs"),
        serving_cert_secret="sec", serving_cert_secret_namespace="sns",
        serving_cert_service="svc", apiservice_name="", serving_cert_validity=20.0,
        serving_cert_ca_validity=60.0)
    assert options_from_args(args) == expected
    defaults = ServerOptions(tls_cert_file=Path("c"), tls_private_key_file=Path("k"))
    assert all(getattr(expected, field.name) != getattr(defaults, field.name)
               for field in dataclasses.fields(ServerOptions)
               if field.name not in ("tls_cert_file", "tls_private_key_file"))


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--authorization-webhook-cache-authorized-ttl", "10",
     "argument --authorization-webhook-cache-authorized-ttl: invalid duration '10': "
     "use e.g. 10s, 1m30s or 500ms"),
    ("--authorization-allowed-cache-ttl", "10",
     "argument --authorization-allowed-cache-ttl: invalid duration '10': "
     "use e.g. 10s, 1m30s or 500ms"),
    ("-v", "debug", "argument -v/--v: 'debug' is not a verbosity: use a whole number from 0"),
    ("--v", "-1", "argument -v/--v: '-1' is not a verbosity"),
    ("--secure-port", "https", "argument --secure-port: 'https' is not a port: "
     "use a whole number from 1 to 65535"),
    ("--secure-port", "70000", "argument --secure-port: '70000' is not a port"),
    ("--max-records-per-pod", "0",
     "argument --max-records-per-pod: '0' is not a positive whole number"),
    ("--output-tail-bytes", "4k",
     "argument --output-tail-bytes: '4k' is not a positive whole number"),
    ("--log-level", "trace", "argument --log-level: invalid choice: 'trace'"),
])
def test_bad_values_exit_with_the_flag_and_what_to_use(capsys, flag, value, message):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*REQUIRED, flag, value])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_no_flag_is_required_and_the_default_is_bootstrap_mode():
    options = options_from_args(build_parser().parse_args([]))
    assert options == ServerOptions()
    assert tls_files(options) is None
    check(options)
    assert tls_files(options_from_args(build_parser().parse_args(REQUIRED))) == (
        Path("c"), Path("k"))


def test_bootstrap_defaults_are_the_install_plans():
    options = ServerOptions()
    assert (options.cert_dir, options.serving_cert_secret, options.serving_cert_secret_namespace,
            options.serving_cert_service, options.apiservice_name) == (
        Path("/var/run/container-notifier/serving-cert"), "container-notifier-serving-cert",
        "container-notifier", "container-notifier", "v1alpha1.notifier.x-k8s.io")
    assert (options.serving_cert_validity, options.serving_cert_ca_validity) == (
        30 * 86400.0, 365 * 86400.0)


@pytest.mark.parametrize(("given", "missing"), [
    (["--tls-cert-file", "c"], "--tls-private-key-file"),
    (["--tls-private-key-file", "k"], "--tls-cert-file"),
])
def test_one_tls_flag_alone_is_an_error(given, missing):
    options = options_from_args(build_parser().parse_args(given))
    with pytest.raises(InvalidOptions) as refused:
        check(options)
    assert str(refused.value) == (
        f"{given[0]} is given without {missing}: give both (serve your own certificate) or "
        "neither (bootstrap one into --serving-cert-secret)")


@pytest.mark.parametrize(("serving", "ca"), [("0", "1h"), ("2h", "1h")])
def test_serving_validity_must_fit_in_the_ca_validity(serving, ca):
    options = options_from_args(build_parser().parse_args(
        ["--serving-cert-validity", serving, "--serving-cert-ca-validity", ca]))
    with pytest.raises(InvalidOptions, match=rf"^--serving-cert-validity \({serving}\) must be "
                       rf"more than 0 and at most --serving-cert-ca-validity \({ca}\)"):
        check(options)


def test_validities_accept_seconds():
    options = options_from_args(build_parser().parse_args(
        ["--serving-cert-validity", "30s", "--serving-cert-ca-validity", "90s"]))
    assert (options.serving_cert_validity, options.serving_cert_ca_validity) == (30.0, 90.0)
    check(options)


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


def test_the_default_leader_election_timings_are_client_gos_and_fit():
    options = options_from_args(build_parser().parse_args(REQUIRED))
    assert (options.leader_elect_lease_duration, options.leader_elect_renew_deadline,
            options.leader_elect_retry_period) == (15.0, 10.0, 2.0)
    check(options)


@pytest.mark.parametrize(("lease", "deadline", "retry"), [
    ("10s", "10s", "2s"), ("15s", "10s", "10s"), ("5s", "10s", "2s"), ("15s", "10s", "0")])
def test_leader_election_timings_that_do_not_fit_are_one_line_naming_the_flags(
        lease, deadline, retry):
    options = options_from_args(build_parser().parse_args([
        *REQUIRED, "--leader-elect-lease-duration", lease,
        "--leader-elect-renew-deadline", deadline, "--leader-elect-retry-period", retry]))
    with pytest.raises(InvalidOptions) as refused:
        check(options)
    message = str(refused.value)
    assert "\n" not in message
    assert f"--leader-elect-lease-duration ({lease})" in message
    assert f"--leader-elect-renew-deadline ({deadline})" in message
    assert f"--leader-elect-retry-period ({retry})" in message
