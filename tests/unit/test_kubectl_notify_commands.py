"""kubectl notify's commands against a fake server: the requests they make, what they print
(terminal or not), and the exit codes scripts rely on (0 succeeded, 1 failed or unfinished or
try later, 2 usage/permission/not found/invalid)."""

from __future__ import annotations

import io
import json
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from kubectl_notify.__main__ import main, run_command
from kubectl_notify.api import NotifierAPI
from kubectl_notify.cli import CanI, ListNotifiers, NotifyPod, NotifySelector, Release
from kubectl_notify.commands.fanout import PLAIN_INTERVAL, Progress
from kubectl_notify.commands.listing import describe_action
from kubectl_notify.connection import Connection
from kubectl_notify.errors import FAILED, SUCCEEDED, USAGE, PluginError, ServerError
from kubectl_notify.impersonation import Impersonating
from kubectl_notify.kubeclient import KubeClient
from kubectl_notify.terminal import Terminal

API = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns"
ANNOTATION = {"notifier.x-k8s.io/notifiers": json.dumps({
    "db": [{"name": "quiesce", "timeoutSeconds": 60,
            "action": {"exec": {"command": ["/bin/sh", "-c", "sync"]}}},
           {"name": "reload", "action": {"signal": "SIGHUP"}}],
    "sidecar": [{"name": "reload", "action": {"signal": "SIGHUP"}}]})}


def status(code: int, reason: str, message: str) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "code": code, "reason": reason, "message": message})


def run_record(phase: str, rv: str = "5", **status_fields: Any) -> dict[str, Any]:
    return {"kind": "PodNotifier", "metadata": {"name": "db-0-quiesce-abcde",
                                                "resourceVersion": rv},
            "spec": {"podName": "db-0", "notifier": "quiesce"},
            "status": {"phase": phase, **status_fields}}


@dataclass
class FakeServer:
    """Answers by (method, path) from `routes`: a Response, or a callable of the request."""

    routes: dict[tuple[str, str], Callable[[httpx.Request], httpx.Response] | httpx.Response] = (
        field(default_factory=dict))
    requests: list[httpx.Request] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return status(404, "NotFound", f"no route {request.method} {request.url.path}")
        return answer(request) if callable(answer) else answer

    def api(self) -> NotifierAPI:
        kube = KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))
        return NotifierAPI(kube, "ns")

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]


def watch_stream(*events: tuple[str, dict[str, Any]]) -> httpx.Response:
    return httpx.Response(200, content="".join(
        json.dumps({"type": kind, "object": obj}) + "\n" for kind, obj in events).encode())


async def run(server: FakeServer, command: Any, tty: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    code = await run_command(server.api(), command, Terminal(out, tty))
    return code, out.getvalue()


NOTIFY = ("POST", f"{API}/pods/db-0/notify")


async def test_notify_success_exits_0_and_sends_the_spec() -> None:
    server = FakeServer({NOTIFY: httpx.Response(201, json=run_record(
        "Succeeded", containers=[{"name": "db", "phase": "Succeeded", "exitCode": 0,
                                  "stdout": "ok\n"}]))})
    code, out = await run(server, NotifyPod("db-0", "quiesce", containers=("db",),
                                            timeout_seconds=60, wait=20))
    assert code == SUCCEEDED
    assert out.splitlines()[2].split()[:3] == ["db", "Succeeded", "0"]
    (request,) = server.sent(*NOTIFY)
    assert dict(request.url.params) == {"waitSeconds": "20"}
    assert json.loads(request.content) == {
        "apiVersion": "notifier.x-k8s.io/v1alpha1", "kind": "PodNotifier",
        "spec": {"notifier": "quiesce", "containers": ["db"], "timeoutSeconds": 60}}


async def test_notify_failure_exits_1() -> None:
    server = FakeServer({NOTIFY: httpx.Response(201, json=run_record(
        "Failed", reason="NonZeroExitCode",
        containers=[{"name": "db", "phase": "Failed", "exitCode": 3}]))})
    code, out = await run(server, NotifyPod("db-0", "quiesce"))
    assert code == FAILED
    assert "Failed (NonZeroExitCode)" in out.splitlines()[0]
    assert dict(server.sent(*NOTIFY)[0].url.params) == {"waitSeconds": "50"}


async def test_a_long_run_is_watched_after_the_server_wait() -> None:
    watch = ("GET", f"{API}/podnotifiers")
    server = FakeServer({
        NOTIFY: httpx.Response(201, json=run_record("Running", rv="7")),
        watch: watch_stream(("MODIFIED", run_record("Running", rv="8")),
                            ("MODIFIED", run_record("Succeeded", rv="9")))})
    code, out = await run(server, NotifyPod("db-0", "quiesce", wait=120))
    assert code == SUCCEEDED
    assert out.startswith("podnotifier/db-0-quiesce-abcde Succeeded")
    (request,) = server.sent(*watch)
    params = dict(request.url.params)
    assert params["watch"] == "true" and params["resourceVersion"] == "7"
    assert params["fieldSelector"] == "metadata.name=db-0-quiesce-abcde"
    assert 60 <= int(params["timeoutSeconds"]) <= 120


async def test_still_running_when_the_wait_ends_exits_1_and_says_how_to_follow() -> None:
    server = FakeServer({NOTIFY: httpx.Response(201, json=run_record("Running")),
                         ("GET", f"{API}/podnotifiers"): watch_stream(),
                         ("GET", f"{API}/podnotifiers/db-0-quiesce-abcde"): httpx.Response(
                             200, json=run_record("Running"))})
    with pytest.raises(PluginError) as raised:
        await run(server, NotifyPod("db-0", "quiesce", wait=1))
    assert raised.value.exit_code == FAILED
    assert "timed out waiting for podnotifier/db-0-quiesce-abcde" in str(raised.value)
    assert "kubectl -n ns get podnotifier db-0-quiesce-abcde -w" in str(raised.value)
    assert dict(server.sent(*NOTIFY)[0].url.params) == {"waitSeconds": "1"}


async def test_a_record_deleted_while_watched_is_an_error() -> None:
    server = FakeServer({NOTIFY: httpx.Response(201, json=run_record("Running")),
                         ("GET", f"{API}/podnotifiers"): watch_stream(
                             ("DELETED", run_record("Running"))) })
    with pytest.raises(PluginError, match="was deleted while waiting") as raised:
        await run(server, NotifyPod("db-0", "quiesce"))
    assert raised.value.exit_code == FAILED


async def test_dry_run_and_no_wait_exit_0_after_creation() -> None:
    server = FakeServer({NOTIFY: httpx.Response(201, json=run_record("Pending"))})
    code, out = await run(server, NotifyPod("db-0", "quiesce", dry_run=True))
    assert (code, out) == (SUCCEEDED, "podnotifier/db-0-quiesce-abcde created (server dry run)\n")
    assert dict(server.sent(*NOTIFY)[0].url.params) == {"waitSeconds": "0", "dryRun": "All"}
    code, out = await run(server, NotifyPod("db-0", "quiesce", wait=0, output="name"))
    assert (code, out) == (SUCCEEDED, "podnotifier.notifier.x-k8s.io/db-0-quiesce-abcde\n")


@pytest.mark.parametrize(("code", "reason", "exit_code"), [
    (403, "Forbidden", USAGE), (401, "Unauthorized", USAGE), (404, "NotFound", USAGE),
    (422, "Invalid", USAGE), (400, "BadRequest", USAGE), (409, "Conflict", FAILED),
    (429, "TooManyRequests", FAILED), (500, "InternalError", FAILED)])
async def test_server_errors_map_to_exit_codes(code: int, reason: str, exit_code: int) -> None:
    server = FakeServer({NOTIFY: status(code, reason, "the message")})
    with pytest.raises(ServerError) as raised:
        await run(server, NotifyPod("db-0", "quiesce"))
    assert str(raised.value) == f"Error from server ({reason}): the message"
    assert raised.value.exit_code == exit_code


def test_main_prints_errors_on_stderr_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db-0"], environ={}) == USAGE
    assert capsys.readouterr().err.startswith("error: give a POD and a NOTIFIER")
    assert main(["db-0", "quiesce", "--kubeconfig", "/nonexistent"], environ={}) == USAGE
    assert capsys.readouterr().err == "error: stat /nonexistent: no such file or directory\n"


def test_main_unreachable_server_exits_1(tmp_path: Any, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    path = tmp_path / "k"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}))
    assert main(["db-0", "quiesce", "--kubeconfig", str(path)], environ={}) == FAILED
    assert capsys.readouterr().err.startswith("error: unable to reach the server: ")


def notification(phase: str, rv: str, **counts: int) -> dict[str, Any]:
    return {"kind": "Notification", "metadata": {"name": "quiesce-x1", "resourceVersion": rv},
            "status": {"phase": phase, "counts": {"total": 3, **counts}}}


FANOUT = ("POST", f"{API}/notifications")
FANOUT_WATCH = ("GET", f"{API}/notifications")


def fanout_server(final: dict[str, Any]) -> FakeServer:
    failed = run_record("Failed", reason="NonZeroExitCode", message="db: exit code 7",
                        containers=[{"name": "db", "phase": "Failed", "exitCode": 7}])
    return FakeServer({
        FANOUT: httpx.Response(201, json=notification("Pending", "1", pending=3)),
        FANOUT_WATCH: watch_stream(
            ("MODIFIED", notification("Running", "2", pending=2, running=1)),
            ("MODIFIED", notification("Running", "3", pending=2, running=1)),
            ("MODIFIED", final)),
        ("GET", f"{API}/podnotifiers"): httpx.Response(200, json={"items": [failed]})})


async def test_fan_out_not_a_terminal_prints_a_line_per_change() -> None:
    server = fanout_server(notification("Succeeded", "4", succeeded=3))
    code, out = await run(server, NotifySelector(
        "app=db,tier in (a,b)", "example.com/Quiesce", parallelism=2, rollback="unquiesce",
        continue_on_failure=True))
    assert code == SUCCEEDED
    assert out.splitlines() == [
        "notification/quiesce-x1 created",
        "notification/quiesce-x1 Pending: 0/3 done (0 succeeded, 0 failed, 0 skipped, "
        "0 running, 3 pending)",
        "notification/quiesce-x1 Running: 0/3 done (0 succeeded, 0 failed, 0 skipped, "
        "1 running, 2 pending)",
        "notification/quiesce-x1 Succeeded: 3/3 done (3 succeeded, 0 failed, 0 skipped, "
        "0 running, 0 pending)",
        "notification/quiesce-x1 Succeeded: 3 succeeded, 0 failed, 0 skipped of 3 pods"]
    body = json.loads(server.sent(*FANOUT)[0].content)
    assert body["metadata"] == {"generateName": "example-com-quiesce-"}
    assert body["spec"] == {
        "selector": {"matchLabels": {"app": "db"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]}]},
        "notifier": "example.com/Quiesce", "parallelism": 2,
        "rollback": {"notifier": "unquiesce"}, "failurePolicy": "Continue"}


async def test_fan_out_on_a_terminal_redraws_a_bar_then_lists_failed_pods() -> None:
    final = notification("Failed", "4", succeeded=2, failed=1)
    final["status"]["conditions"] = [{"type": "Failed", "status": "True",
                                      "reason": "PodsFailed", "message": "1 of 3 pods failed"}]
    server = fanout_server(final)
    code, out = await run(server, NotifySelector("app=db", "quiesce"), tty=True)
    assert code == FAILED
    assert out.count("\r\033[K[") == 4
    assert ("\r\033[K[====================xxxxxxxxxx] 3/3 done: 2 succeeded, 1 failed, "
            "0 running\n") in out
    tail = out.rsplit("\n", 6)[-6:]
    assert tail[0] == "notification/quiesce-x1 Failed: 2 succeeded, 1 failed, 0 skipped of 3 pods"
    assert tail[1] == "PodsFailed: 1 of 3 pods failed"
    assert tail[3].split() == ["POD", "REASON", "EXIT", "MESSAGE"]
    assert tail[4].split() == ["db-0", "NonZeroExitCode", "7", "db:", "exit", "code", "7"]
    (listed,) = server.sent("GET", f"{API}/podnotifiers")
    assert dict(listed.url.params) == {
        "labelSelector": "notifier.x-k8s.io/notification=quiesce-x1,"
                         "!notifier.x-k8s.io/rollback-attempt",
        "fieldSelector": "status.phase=Failed"}


async def test_fan_out_bad_selector_is_a_usage_error() -> None:
    with pytest.raises(PluginError) as raised:
        await run(FakeServer(), NotifySelector("app=(", "quiesce"))
    assert raised.value.exit_code == USAGE


def review_route(allowed: Callable[[dict[str, Any]], bool]) -> Callable[[httpx.Request],
                                                                         httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        attributes = body["spec"]["resourceAttributes"]
        ok = allowed(attributes)
        return httpx.Response(201, json={**body, "status": {
            "allowed": ok, "reason": "RBAC: allowed by RoleBinding x" if ok else ""}})
    return answer


REVIEWS = ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")


async def test_can_i_asks_for_pods_notify_in_the_notifier_group() -> None:
    server = FakeServer({REVIEWS: review_route(lambda a: a["subresource"] == "notify"),
                         NOTIFY: status(403, "Forbidden", 'pods "db-0" is forbidden: rule 1')})
    code, out = await run(server, CanI("db-0", "quiesce"))
    assert code == FAILED
    assert out.splitlines() == [
        "create pods/notify (notifier.x-k8s.io) on pod db-0: yes - RBAC: allowed by "
        "RoleBinding x",
        'run notifier "quiesce": no - pods "db-0" is forbidden: rule 1']
    body = json.loads(server.sent(*REVIEWS)[0].content)
    assert body["spec"]["resourceAttributes"] == {
        "namespace": "ns", "verb": "create", "group": "notifier.x-k8s.io", "resource": "pods",
        "subresource": "notify", "name": "db-0"}
    assert dict(server.sent(*NOTIFY)[0].url.params)["dryRun"] == "All"


async def test_can_i_yes_exits_0_and_no_exits_1() -> None:
    server = FakeServer({REVIEWS: review_route(lambda a: True)})
    assert (await run(server, CanI("db-0")))[0] == SUCCEEDED
    server = FakeServer({REVIEWS: review_route(lambda a: False)})
    assert await run(server, CanI("db-0")) == (
        FAILED, "create pods/notify (notifier.x-k8s.io) on pod db-0: no\n")


def pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}}


async def test_list_asks_the_server_per_notifier_and_runs_nothing() -> None:
    def notify(request: httpx.Request) -> httpx.Response:
        assert request.url.params["dryRun"] == "All"
        if json.loads(request.content)["spec"]["notifier"] == "reload":
            return status(403, "Forbidden", "rule 1 failed; rule 2 failed")
        return httpx.Response(201, json=run_record("Pending"))

    server = FakeServer({("GET", "/api/v1/namespaces/ns/pods/db-0"): httpx.Response(
        200, json=pod("db-0", ANNOTATION)), NOTIFY: notify,
        REVIEWS: review_route(lambda a: False)})
    code, out = await run(server, ListNotifiers(pod="db-0", output="wide"))
    assert code == SUCCEEDED
    assert [re.split(r" {3,}", line) for line in out.splitlines()] == [
        ["POD", "CONTAINER", "NOTIFIER", "ACTION", "TIMEOUT", "MAY RUN", "MESSAGE"],
        ["db-0", "db", "quiesce", "exec /bin/sh -c sync", "60s", "yes (template)", "-"],
        ["db-0", "db", "reload", "signal SIGHUP", "30s", "no (Forbidden)",
         "rule 1 failed; rule 2 failed"],
        ["db-0", "sidecar", "reload", "signal SIGHUP", "30s", "no (Forbidden)",
         "rule 1 failed; rule 2 failed"]]
    assert len(server.sent(*NOTIFY)) == 2
    assert all(r.url.params["dryRun"] == "All" for r in server.sent(*NOTIFY))
    exec_review = json.loads(server.sent(*REVIEWS)[0].content)["spec"]["resourceAttributes"]
    assert (exec_review["group"], exec_review["subresource"]) == ("", "exec")


async def test_list_by_selector_json_and_pods_without_or_with_broken_declarations() -> None:
    server = FakeServer({
        ("GET", "/api/v1/namespaces/ns/pods"): httpx.Response(200, json={"items": [
            pod("plain", {}), pod("broken", {"notifier.x-k8s.io/notifiers": "{nope"})]})})
    code, out = await run(server, ListNotifiers(selector="app=db", output="json"))
    assert code == SUCCEEDED
    (row,) = json.loads(out)
    assert (row["pod"], row["mayRun"], row["why"]) == ("broken", False, "InvalidAnnotation")
    assert server.sent("GET", "/api/v1/namespaces/ns/pods")[0].url.params["labelSelector"] == (
        "app=db")
    code, out = await run(server, ListNotifiers(selector="app=db"))
    assert out.splitlines()[1].split() == ["plain", "-", "<none>", "-", "-", "-"]
    assert out.splitlines()[2].split()[:2] == ["broken", "-"]


async def test_as_and_as_group_send_impersonation_headers() -> None:
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(201, json={"status": {"allowed": True}})

    connection = Connection("https://kube.test", ssl.create_default_context())
    transport = Impersonating(connection, "bot", ("team-a", "team-b"),
                              inner=httpx.MockTransport(answer))
    api = NotifierAPI(KubeClient(connection, transport=transport), "ns")
    assert (await run_command(api, CanI("db-0"), Terminal(io.StringIO(), False))) == SUCCEEDED
    (headers,) = seen
    assert headers["Impersonate-User"] == "bot"
    assert headers.get_list("Impersonate-Group") == ["team-a", "team-b"]


def test_plain_progress_is_rate_limited_within_a_phase_and_ends_with_the_last_state() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress(Terminal(out, tty=False), lambda: now[0])
    progress.show(notification("Running", "1", pending=3))
    progress.show(notification("Running", "2", pending=2, running=1))  # same second: held
    now[0] += PLAIN_INTERVAL
    progress.show(notification("Running", "3", pending=1, running=1, succeeded=1))
    progress.show(notification("Running", "4", running=1, succeeded=2))  # held
    progress.end(notification("Running", "4", running=1, succeeded=2))
    assert [line.split(": ")[1] for line in out.getvalue().splitlines()] == [
        "0/3 done (0 succeeded, 0 failed, 0 skipped, 0 running, 3 pending)",
        "1/3 done (1 succeeded, 0 failed, 0 skipped, 1 running, 1 pending)",
        "2/3 done (2 succeeded, 0 failed, 0 skipped, 1 running, 0 pending)"]


async def test_a_held_run_returns_once_held_and_says_how_to_release_it() -> None:
    watch = ("GET", f"{API}/podnotifiers")
    server = FakeServer({
        NOTIFY: httpx.Response(201, json=run_record("Running", rv="7")),
        watch: watch_stream(("MODIFIED", run_record("Held", rv="8",
                                                    heldTime="2026-12-01T12:00:00.000Z")),
                            ("MODIFIED", run_record("Succeeded", rv="9")))})
    code, out = await run(server, NotifyPod("db-0", "lock"))
    assert code == SUCCEEDED
    lines = out.splitlines()
    assert lines[0] == "podnotifier/db-0-quiesce-abcde Held"
    assert lines[-1] == ("held until released: kubectl notify -n ns release "
                         "podnotifier/db-0-quiesce-abcde")


def windowed(phase: str, rv: str, quiesced: bool, **counts: int) -> dict[str, Any]:
    obj = notification(phase, rv, **counts)
    obj["spec"] = {"notifier": "quiesce", "release": {"notifier": "unquiesce",
                                                      "maxHoldSeconds": 600}}
    if quiesced:
        obj["status"]["window"] = {"quiescedTime": "2026-12-01T12:00:00.000Z"}
        obj["status"]["conditions"] = [{"type": "Quiesced", "status": "True",
                                        "reason": "AllPodsQuiesced"}]
    return obj


async def test_a_window_returns_once_every_pod_is_quiesced() -> None:
    server = FakeServer({
        FANOUT: httpx.Response(201, json=windowed("Pending", "1", False, pending=3)),
        FANOUT_WATCH: watch_stream(
            ("MODIFIED", windowed("Running", "2", False, pending=2, running=1)),
            ("MODIFIED", windowed("Running", "3", True, succeeded=3)),
            ("MODIFIED", windowed("Succeeded", "4", True, succeeded=3)))})
    code, out = await run(server, NotifySelector(
        "app=db", "quiesce", release="unquiesce", release_after_seconds=0, max_hold_seconds=600,
        concurrency_policy="Wait"))
    assert code == SUCCEEDED
    assert out.splitlines()[-2:] == [
        "notification/quiesce-x1 Quiesced: 3 pods quiesced at 2026-12-01T12:00:00.000Z; "
        "released at the latest after 600s",
        "quiesced until released: kubectl notify -n ns release notification/quiesce-x1"]
    body = json.loads(server.sent(*FANOUT)[0].content)
    assert body["spec"]["release"] == {"notifier": "unquiesce", "afterSeconds": 0,
                                       "maxHoldSeconds": 600}
    assert body["spec"]["concurrencyPolicy"] == "Wait"


async def test_release_posts_the_subresource_and_waits_for_the_end() -> None:
    post = ("POST", f"{API}/notifications/quiesce-x1/release")
    released = windowed("Succeeded", "6", True, succeeded=3, released=3)
    released["status"]["window"].update(releaseTime="2026-12-01T12:00:05.000Z",
                                        unquiescedTime="2026-12-01T12:00:06.000Z")
    server = FakeServer({
        post: httpx.Response(200, json=windowed("Running", "5", True, succeeded=3)),
        FANOUT_WATCH: watch_stream(("MODIFIED", released))})
    code, out = await run(server, Release("notifications", "quiesce-x1"))
    assert code == SUCCEEDED
    assert json.loads(server.sent(*post)[0].content) == {}
    assert out.splitlines() == [
        "notification/quiesce-x1 Succeeded: 3 succeeded, 0 failed, 0 skipped of 3 pods, "
        "3 released",
        "window: quiesced 2026-12-01T12:00:00.000Z, release started 2026-12-01T12:00:05.000Z, "
        "unquiesced 2026-12-01T12:00:06.000Z"]


async def test_release_of_a_record_without_waiting_and_a_failed_release() -> None:
    post = ("POST", f"{API}/podnotifiers/db-0-quiesce-abcde/release")
    server = FakeServer({post: httpx.Response(200, json=run_record("Held"))})
    code, out = await run(server, Release("podnotifiers", "db-0-quiesce-abcde", wait=0))
    assert (code, out) == (SUCCEEDED, "podnotifier/db-0-quiesce-abcde release requested\n")
    server = FakeServer({post: httpx.Response(200, json=run_record(
        "Failed", reason="HoldExpired", message="not released within 600s"))})
    code, out = await run(server, Release("podnotifiers", "db-0-quiesce-abcde"))
    assert code == FAILED
    assert out.startswith("podnotifier/db-0-quiesce-abcde Failed (HoldExpired)")
    server = FakeServer({post: status(403, "Forbidden", "may not release")})
    with pytest.raises(ServerError):
        await run(server, Release("podnotifiers", "db-0-quiesce-abcde"))


NOTIFY_PATH = f"{API}/pods/db-0/notify"
APISERVICE_PATH = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.notifier.x-k8s.io"


async def test_a_missing_apiservice_is_named_not_404_page_not_found() -> None:
    """kube-apiserver's own 404 for a group nobody registered is plain text, no Status."""
    server = FakeServer({("POST", NOTIFY_PATH): httpx.Response(
        404, text="404 page not found\n", headers={"Content-Type": "text/plain"})})
    with pytest.raises(PluginError) as raised:
        await run(server, NotifyPod(pod="db-0", notifier="quiesce"))
    assert raised.value.exit_code == USAGE
    assert str(raised.value) == (
        "error: this cluster does not serve notifier.x-k8s.io/v1alpha1 (kube-apiserver answered "
        "404: 404 page not found): the APIService v1alpha1.notifier.x-k8s.io is not registered. "
        "Install container-notifier (docs/install.md), then check it: kubectl get apiservice "
        "v1alpha1.notifier.x-k8s.io")


@pytest.mark.parametrize(("apiservice", "why"), [
    (httpx.Response(200, json={"status": {"conditions": [
        {"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck",
         "message": "failing or missing response from https://10.0.0.1:443"}]}}),
     " (FailedDiscoveryCheck: failing or missing response from https://10.0.0.1:443)"),
    (status(403, "Forbidden", "apiservices is forbidden"), ""),
])
async def test_an_unavailable_apiservice_is_named_not_unable_to_reach_the_server(
        apiservice: httpx.Response, why: str) -> None:
    server = FakeServer({
        ("POST", NOTIFY_PATH): httpx.Response(503, text="service unavailable\n",
                                              headers={"Content-Type": "text/plain"}),
        ("GET", APISERVICE_PATH): apiservice})
    with pytest.raises(PluginError) as raised:
        await run(server, NotifyPod(pod="db-0", notifier="quiesce"))
    assert raised.value.exit_code == FAILED
    assert str(raised.value) == (
        "error: the notifier.x-k8s.io API is unavailable (kube-apiserver answered 503: service "
        f"unavailable): its APIService v1alpha1.notifier.x-k8s.io is not Available{why}. See "
        "why: kubectl get apiservice v1alpha1.notifier.x-k8s.io; what to do: "
        'docs/troubleshooting.md, "The APIService is not Available"')
    assert "unable to reach the server" not in str(raised.value)


async def test_the_servers_own_404_and_503_stay_errors_from_the_server() -> None:
    server = FakeServer({("POST", NOTIFY_PATH): status(404, "NotFound", 'pods "db-0" not found')})
    with pytest.raises(ServerError) as missing:
        await run(server, NotifyPod(pod="db-0", notifier="quiesce"))
    assert str(missing.value) == 'Error from server (NotFound): pods "db-0" not found'
    server = FakeServer({("POST", NOTIFY_PATH): status(
        503, "ServiceUnavailable", "storage unavailable; retry")})
    with pytest.raises(ServerError) as busy:
        await run(server, NotifyPod(pod="db-0", notifier="quiesce"))
    assert busy.value.exit_code == FAILED
    assert str(busy.value) == "Error from server (ServiceUnavailable): storage unavailable; retry"


async def test_an_unavailable_apiservice_while_watching_is_named_too() -> None:
    held = run_record("Running")
    server = FakeServer({
        ("POST", NOTIFY_PATH): httpx.Response(201, json=held),
        ("GET", f"{API}/podnotifiers"): httpx.Response(503, text="service unavailable\n"),
        ("GET", APISERVICE_PATH): status(403, "Forbidden", "no")})
    with pytest.raises(PluginError, match="the notifier.x-k8s.io API is unavailable"):
        await run(server, NotifyPod(pod="db-0", notifier="quiesce"))


def test_an_http_notifier_is_listed_by_method_port_and_path() -> None:
    assert describe_action({"action": {"http": {"method": "POST", "port": "web",
                                                "path": "/-/reload"}}}) == (
        "http POST :web/-/reload")
    assert describe_action({"action": {"http": {"method": "GET", "port": 8443,
                                                "scheme": "HTTPS"}}}) == "http GET :8443/ (HTTPS)"
