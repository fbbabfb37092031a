"""docs/rbac-recipes.md, run as it is written: its commands grant the backup controller, on-call
and the auditors (and its checks answer what the page shows); then each subject acts through
kube-apiserver's aggregator, the ServiceAccount with a TokenRequest token and the humans with
client certificates, and gets exactly what the page says is allowed and refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.console import run
from tests.support.doc_commands import console_commands, console_transcript
from tests.support.extension import kube_apiserver
from tests.support.kube import Cluster, wait_until
from tests.support.notify import (
    API,
    create_notification,
    declare,
    exec_notifier,
    notification,
    notify,
    wait_finished,
)
from tests.support.plugin import service_account_token

pytestmark = pytest.mark.cluster

PAGE = "docs/rbac-recipes.md"
CHOSEN = ("shop", "billing")
"""The namespaces the page binds the backup controller in."""
RECIPE_NAMESPACE = "backup"
BACKUP = "system:serviceaccount:backup:backup-controller"
GROUP = "notifier.x-k8s.io"


GRANTS = ("Grant the backup controller", "Grant on-call", "Grant auditors")
CHECKS = ("Check the backup controller", "Check on-call", "Check auditors")


def test_this_module_runs_every_command_of_the_page() -> None:
    run_here = [command for heading in (*GRANTS, "Undo") + CHECKS
                for command in console_commands(PAGE, heading)]
    assert sorted(run_here) == sorted(console_commands(PAGE))


def _absent(cluster: Cluster, namespace: str) -> bool:
    with cluster.admin() as kube:
        return kube.get(f"/api/v1/namespaces/{namespace}").status_code == 404


def _undo(cluster: Cluster) -> None:
    """The page's Undo commands (tolerating what is already gone), then the namespaces the
    page's commands assume gone too."""
    for command in console_commands(PAGE, "Undo"):
        run(cluster, command)
    for namespace in (*CHOSEN, RECIPE_NAMESPACE):
        cluster.delete_namespace(namespace)
    for namespace in (*CHOSEN, RECIPE_NAMESPACE):
        wait_until(lambda n=namespace: _absent(cluster, n), f"namespace {namespace} gone", 120)


@pytest.fixture(scope="module")
def granted(cluster: Cluster) -> Iterator[None]:
    """The chosen namespaces exist (the page binds in them), and every grant of the page ran."""
    _undo(cluster)
    with cluster.admin() as kube:
        for namespace in CHOSEN:
            created = kube.post("/api/v1/namespaces", json={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            assert created.status_code == 201, created.text
    try:
        for heading in GRANTS:
            for command in console_commands(PAGE, heading):
                ran = run(cluster, command)
                assert ran.returncode == 0, f"{command}\n{ran.output}"
        yield
    finally:
        _undo(cluster)


DECLARED = declare(app=[exec_notifier("quiesce", "echo quiesced the shop database"),
                        exec_notifier("unquiesce", "echo unquiesced"),
                        exec_notifier("reload", "echo reloaded")])


@pytest.fixture(scope="module")
def db_pod(cluster: Cluster, granted: None) -> str:
    """A pod of the Deployment `db` in `shop` whose template declares quiesce, unquiesce and
    reload (trusted by rule 1)."""
    (pod,) = cluster.deploy("shop", "db", annotations=DECLARED)
    return str(pod["metadata"]["name"])


@pytest.mark.parametrize("heading", CHECKS)
def test_the_checks_answer_what_the_page_shows(cluster: Cluster, granted: None,
                                               heading: str) -> None:
    for step in console_transcript(PAGE, heading):
        assert run(cluster, step.command).lines() == list(step.output), step.command


def _as_token(cluster: Cluster, token: str) -> httpx.Client:
    client = kube_apiserver(cluster)
    client.headers["Authorization"] = f"Bearer {token}"
    return client


def _forbidden(response: httpx.Response, message: str) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["message"] == message


def _denial(user: str, verb: str, resource: str, namespace: str, *, name: str = "",
            group: str = GROUP) -> str:
    """kube-apiserver's 403 message for an RBAC denial (a create names no object)."""
    parent = resource.split("/")[0]
    what = f"{parent}.{group}" if group else parent
    named = f' "{name}"' if name else ""
    return (f'{what}{named} is forbidden: User "{user}" cannot {verb} resource "{resource}" in '
            f'API group "{group}" in the namespace "{namespace}"')


def _succeeded(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    record = response.json()
    assert record["status"]["phase"] == "Succeeded", record["status"]
    return record


def _exec(client: httpx.Client, namespace: str, pod: str) -> httpx.Response:
    return client.post(f"/api/v1/namespaces/{namespace}/pods/{pod}/exec",
                       params={"command": "true", "container": "app", "stdout": "true"})


def test_the_backup_controller_notifies_in_its_namespaces_only(
        cluster: Cluster, db_pod: str, namespace: str) -> None:
    other_pod = cluster.deploy(namespace, "db", annotations=DECLARED)[0]["metadata"]["name"]
    token = service_account_token(cluster, RECIPE_NAMESPACE, "backup-controller")
    with _as_token(cluster, token) as backup:
        quiesced = _succeeded(notify(backup, "shop", db_pod, "quiesce"))
        assert quiesced["spec"]["requestedBy"]["username"] == BACKUP
        _succeeded(notify(backup, "shop", db_pod, "unquiesce"))
        # RBAC cannot tell notifiers apart: a declared reload runs for it too.
        _succeeded(notify(backup, "shop", db_pod, "reload"))

        created = create_notification(backup, "shop", notification(
            "nightly", "quiesce", {"app": "db"}))
        assert created.status_code == 201, created.text
        assert wait_finished(cluster, "shop", "nightly")["status"]["phase"] == "Succeeded"
        released = backup.post(
            f"{API}/namespaces/shop/podnotifiers/{quiesced['metadata']['name']}/release")
        assert released.status_code == 409, released.text  # authorized; nothing held
        assert released.json()["reason"] == "Conflict"
        listed = backup.get(f"{API}/namespaces/shop/podnotifiers")
        assert listed.status_code == 200, listed.text

        _forbidden(notify(backup, namespace, other_pod, "quiesce"),
                   _denial(BACKUP, "create", "pods/notify", namespace, name=other_pod))
        _forbidden(create_notification(backup, namespace, notification(
            "nightly", "quiesce", {"app": "db"})),
            _denial(BACKUP, "create", "notifications", namespace))
        record = quiesced["metadata"]["name"]
        _forbidden(backup.delete(f"{API}/namespaces/shop/podnotifiers/{record}"),
                   _denial(BACKUP, "delete", "podnotifiers", "shop", name=record))
        _forbidden(_exec(backup, "shop", db_pod),
                   _denial(BACKUP, "create", "pods/exec", "shop", name=db_pod, group=""))


def test_on_call_may_run_any_declared_notifier_and_nothing_else(
        cluster: Cluster, db_pod: str) -> None:
    user = cluster.user("ann", groups=("sre-oncall",))
    with cluster.client_for(user) as ann:
        reloaded = _succeeded(notify(ann, "shop", db_pod, "reload"))
        assert reloaded["spec"]["requestedBy"]["username"] == "ann"
        _succeeded(notify(ann, "shop", db_pod, "quiesce"))  # not limited to reload
        _succeeded(notify(ann, "shop", db_pod, "unquiesce"))
        assert ann.get(f"/api/v1/namespaces/shop/pods/{db_pod}").status_code == 200

        _forbidden(create_notification(ann, "shop", notification(
            "by-hand", "reload", {"app": "db"})),
            _denial("ann", "create", "notifications", "shop"))
        record = reloaded["metadata"]["name"]
        _forbidden(ann.delete(f"{API}/namespaces/shop/podnotifiers/{record}"),
                   _denial("ann", "delete", "podnotifiers", "shop", name=record))
        _forbidden(_exec(ann, "shop", db_pod),
                   _denial("ann", "create", "pods/exec", "shop", name=db_pod, group=""))


def test_auditors_read_every_record_with_its_output_and_change_nothing(
        cluster: Cluster, db_pod: str) -> None:
    token = service_account_token(cluster, RECIPE_NAMESPACE, "backup-controller")
    with _as_token(cluster, token) as backup:
        quiesced = _succeeded(notify(backup, "shop", db_pod, "quiesce"))
    user = cluster.user("eve", groups=("auditors",))
    with cluster.client_for(user) as eve:
        listed = eve.get(f"{API}/podnotifiers")  # every namespace
        assert listed.status_code == 200, listed.text
        (seen,) = [r for r in listed.json()["items"]
                   if r["metadata"]["name"] == quiesced["metadata"]["name"]]
        assert seen["metadata"]["namespace"] == "shop"
        (container,) = seen["status"]["containers"]
        assert container["stdout"] == "quiesced the shop database\n"  # output is readable
        assert eve.get(f"{API}/notifications").status_code == 200

        _forbidden(notify(eve, "shop", db_pod, "reload"),
                   _denial("eve", "create", "pods/notify", "shop", name=db_pod))
        _forbidden(create_notification(eve, "shop", notification(
            "audit", "reload", {"app": "db"})),
            _denial("eve", "create", "notifications", "shop"))
        record = quiesced["metadata"]["name"]
        _forbidden(eve.delete(f"{API}/namespaces/shop/podnotifiers/{record}"),
                   _denial("eve", "delete", "podnotifiers", "shop", name=record))
