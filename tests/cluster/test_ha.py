"""High availability against the real control plane: two server replicas behind HAProxy that
keep their records in the Kubernetes API (issue 10). Requests go through kube-apiserver's
aggregator as real users with real RBAC, or to one replica's own port through the front proxy's
certificate and headers, as the aggregator sends them, where a test needs a given replica.

Every test that kills a replica starts it again before it ends, so the session's plane stays
healthy for the tests after it."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import shlex
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.extension import cluster_pair, proxied_as, server_port, server_ssl_context
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import (
    API,
    body,
    create_notification,
    declare,
    exec_notifier,
    notification,
    notify_path,
    records,
    wait_finished,
)

pytestmark = pytest.mark.cluster

LEASE_NAMESPACE = "container-notifier"
LEADER_LEASE = "container-notifier-fanout"
REPLICA_PREFIX = "container-notifier-"
LEASE_DURATION_SECONDS = 15.0
TAKEOVER_BOUND_SECONDS = 45.0
"""A dead replica's runs end within its Lease duration plus the takeover check interval; the
rest is slack for two busy cores."""
NOTIFY = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"], "verbs": ["create"]}
READ_RECORDS = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
                "verbs": ["get", "list", "watch"]}


@pytest.fixture(autouse=True)
def two_replicas(cluster: Cluster) -> Iterator[None]:
    """Every test here needs two replicas; afterwards every replica runs and is routed to."""
    assert cluster.replicas >= 2, "the HA tests need CN_REPLICAS of at least 2 (default 2)"
    yield
    for replica in range(cluster.replicas):
        if not cluster.replica_ready(replica):
            cluster.restart_replica(replica)


@pytest.fixture
def caller(cluster: Cluster, namespace: str) -> User:
    user = cluster.user("ha-caller")
    cluster.grant(namespace, user, [NOTIFY, READ_RECORDS])
    return user


def replica_client(cluster: Cluster, user: User, replica: int, timeout: float = 30.0
                   ) -> httpx.Client:
    """A client of one replica's own port, as `user` through the front proxy's identity."""
    context = server_ssl_context(cluster, cluster_pair(cluster, "front-proxy-client"))
    return httpx.Client(base_url=f"https://127.0.0.1:{server_port(cluster, replica)}",
                        verify=context, headers=proxied_as(user), timeout=timeout)


def notify_on(cluster: Cluster, user: User, replica: int, namespace: str, pod: str,
              notifier: str, wait: int = 0) -> httpx.Response:
    with replica_client(cluster, user, replica) as client:
        return client.post(notify_path(namespace, pod), params={"waitSeconds": str(wait)},
                           json=body(notifier))


def leader(cluster: Cluster) -> int:
    """The replica that holds the fan-out leader Lease."""
    with cluster.admin() as kube:
        lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/"
                         f"{LEADER_LEASE}").json()
    holder = lease["spec"]["holderIdentity"]
    assert holder.startswith(REPLICA_PREFIX), lease
    return int(holder.removeprefix(REPLICA_PREFIX))


def apiservice_available(cluster: Cluster) -> bool:
    with cluster.admin(timeout=5) as kube:
        obj = kube.get("/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.notifier.x-k8s.io"
                       ).json()
    return any(c["type"] == "Available" and c["status"] == "True"
               for c in obj.get("status", {}).get("conditions", []))


def record(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    with cluster.admin() as kube:
        response = kube.get(f"{API}/namespaces/{namespace}/podnotifiers/{name}")
    assert response.status_code == 200, response.text
    return response.json()


# Any replica serves any request


def test_records_created_through_one_replica_are_listed_and_watched_through_the_other(
        cluster: Cluster, namespace: str, caller: User) -> None:
    (pod,) = cluster.deploy(namespace, "web", annotations=declare(app=[
        exec_notifier("reload", "echo reloaded")]))
    name = pod["metadata"]["name"]
    created = notify_on(cluster, caller, 0, namespace, name, "reload", wait=20)
    assert created.status_code == 201, created.text
    first = created.json()["metadata"]["name"]

    collection = f"{API}/namespaces/{namespace}/podnotifiers"
    with replica_client(cluster, caller, 1) as other:
        listed = other.get(collection)
        assert listed.status_code == 200, listed.text
        assert [r["metadata"]["name"] for r in listed.json()["items"]] == [first]
    with replica_client(cluster, caller, 0) as one:
        version = one.get(collection).json()["metadata"]["resourceVersion"]

    events: list[dict[str, Any]] = []
    with replica_client(cluster, caller, 1) as other, other.stream(
            "GET", collection, params={"watch": "1", "resourceVersion": version,
                                       "timeoutSeconds": "30"}) as watch:
        assert watch.status_code == 200
        second = notify_on(cluster, caller, 0, namespace, name, "reload", wait=20)
        assert second.status_code == 201, second.text
        wanted = second.json()["metadata"]["name"]
        for line in watch.iter_lines():
            event = json.loads(line)
            events.append(event)
            if (event["object"]["metadata"]["name"] == wanted
                    and event["object"].get("status", {}).get("phase") == "Succeeded"):
                break
    names = {e["object"]["metadata"]["name"] for e in events}
    assert names == {wanted}, "the watch from replica 0's version replays only what came after"
    assert events[0]["type"] == "ADDED"


CONSISTENT_ROUNDS = 200
CREATED_ROUNDS = 40
READ_AND_PATCH_RECORDS = {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
                          "verbs": ["get", "list", "patch"]}


def test_a_read_through_either_replica_sees_a_patch_just_acknowledged_by_the_other(
        cluster: Cluster, namespace: str) -> None:
    """Each round patches a label through one replica, then gets the record and lists by the
    label through the other: every read must see the patch (consistent reads), 200 rounds."""
    user = cluster.user("ha-reader")
    cluster.grant(namespace, user, [NOTIFY, READ_AND_PATCH_RECORDS])
    (pod,) = cluster.deploy(namespace, "web", annotations=declare(app=[
        exec_notifier("reload", "echo reloaded")]))
    created = notify_on(cluster, user, 0, namespace, pod["metadata"]["name"], "reload", wait=20)
    assert created.status_code == 201, created.text
    name = created.json()["metadata"]["name"]
    collection = f"{API}/namespaces/{namespace}/podnotifiers"
    misses = []
    with replica_client(cluster, user, 0) as first, replica_client(cluster, user, 1) as second:
        clients = (first, second)
        for round_ in range(CONSISTENT_ROUNDS):
            writer, reader = clients[round_ % 2], clients[1 - round_ % 2]
            patched = writer.patch(f"{collection}/{name}",
                                   json={"metadata": {"labels": {"round": str(round_)}}},
                                   headers={"Content-Type": "application/merge-patch+json"})
            assert patched.status_code == 200, patched.text
            got = reader.get(f"{collection}/{name}")
            assert got.status_code == 200, got.text
            if got.json()["metadata"]["labels"].get("round") != str(round_):
                misses.append(("get", round_))
            listed = reader.get(collection, params={"labelSelector": f"round={round_}"})
            assert listed.status_code == 200, listed.text
            if [r["metadata"]["name"] for r in listed.json()["items"]] != [name]:
                misses.append(("list", round_))
    assert misses == []


def finished(client: httpx.Client, path: str) -> bool:
    return client.get(path).json()["status"]["phase"] in ("Succeeded", "Failed")


def test_a_list_through_either_replica_holds_a_record_just_created_through_the_other(
        cluster: Cluster, namespace: str, caller: User) -> None:
    (pod,) = cluster.deploy(namespace, "web", annotations=declare(app=[
        exec_notifier("reload", "echo reloaded")]))
    collection = f"{API}/namespaces/{namespace}/podnotifiers"
    misses = []
    with replica_client(cluster, caller, 0) as first, replica_client(cluster, caller, 1) as second:
        clients = (first, second)
        for round_ in range(CREATED_ROUNDS):
            writer, reader = clients[round_ % 2], clients[1 - round_ % 2]
            created = writer.post(notify_path(namespace, pod["metadata"]["name"]),
                                  params={"waitSeconds": "0"}, json=body("reload"))
            assert created.status_code == 201, created.text
            name = created.json()["metadata"]["name"]
            listed = reader.get(collection)
            assert listed.status_code == 200, listed.text
            if name not in {r["metadata"]["name"] for r in listed.json()["items"]}:
                misses.append(("list", round_))
            if reader.get(f"{collection}/{name}").status_code != 200:
                misses.append(("get", round_))
            wait_until(functools.partial(finished, writer, f"{collection}/{name}"),
                       "the record finished", timeout=30)  # before the next notify of it
    assert misses == []


def test_two_replicas_racing_to_run_one_notifier_on_one_pod_one_201_one_409(
        cluster: Cluster, namespace: str, caller: User) -> None:
    pods = cluster.deploy(namespace, "db", replicas=3, annotations=declare(app=[
        exec_notifier("quiesce", "sleep 3", timeout=30)]))
    barrier = threading.Barrier(2)

    def race(replica: int, pod: str) -> int:
        barrier.wait()
        return notify_on(cluster, caller, replica, namespace, pod, "quiesce").status_code

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for pod in pods:
            answers = sorted(pool.map(race, (0, 1), [pod["metadata"]["name"]] * 2))
            assert answers == [201, 409], pod["metadata"]["name"]


def test_at_most_k_unfinished_and_k_stored_after_10k_concurrent_notifies_over_both(
        cluster: Cluster, namespace: str, caller: User, tmp_path: Path) -> None:
    k = 10
    # Each run waits until the burst of requests is over, however slow the machine: a run that
    # ended during it would free a slot, and an 11th create would be right. Each command that
    # starts appends a line on the host, so the count of runs is a side effect, not a status.
    started, gate = tmp_path / "started", tmp_path / "gate"
    script = (f"echo $$ >> {shlex.quote(str(started))}; "
              f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.1; done")
    notifiers = [exec_notifier(f"n{i}", script, timeout=120) for i in range(10 * k)]
    (pod,) = cluster.deploy(namespace, "busy", annotations=declare(app=notifiers))
    name = pod["metadata"]["name"]
    start = threading.Barrier(10 * k)

    def call(i: int) -> int:
        start.wait()
        return notify_on(cluster, caller, i % 2, namespace, name, f"n{i}").status_code

    with concurrent.futures.ThreadPoolExecutor(10 * k) as pool:
        answers = Counter(pool.map(call, range(10 * k)))
    assert set(answers) <= {201, 429}, answers
    assert 1 <= answers[201] <= k, answers
    unfinished = [r for r in records(cluster, namespace)
                  if r["status"].get("phase") in ("Pending", "Running")]
    assert len(unfinished) <= k
    def commands() -> int:
        return len(started.read_text().splitlines()) if started.exists() else 0

    wait_until(lambda: commands() >= answers[201], "every admitted run's command to start", 60)
    assert commands() == answers[201], "a command ran for a notify that was refused"
    gate.touch()

    # the stored bound: finished records beyond K are evicted within seconds
    wait_until(lambda: not [r for r in records(cluster, namespace)
                            if r["status"].get("phase") in ("Pending", "Running")],
               "every run to finish", 60)

    def quick(i: int) -> int:
        return notify_on(cluster, caller, i % 2, namespace, name, f"n{i}").status_code

    with concurrent.futures.ThreadPoolExecutor(4 * k) as pool:
        list(pool.map(quick, range(10 * k)))
    wait_until(lambda: len(records(cluster, namespace)) <= k,
               f"at most {k} stored records on the pod", 15)


# Nothing is lost when a replica dies


def test_a_killed_replicas_running_records_end_interrupted(
        cluster: Cluster, namespace: str, caller: User) -> None:
    pods = cluster.deploy(namespace, "db", replicas=2, annotations=declare(app=[
        exec_notifier("hang", "sleep 60", timeout=120)]))
    victim = 1
    started = [notify_on(cluster, caller, victim, namespace, p["metadata"]["name"], "hang")
               for p in pods]
    assert [s.status_code for s in started] == [201, 201], [s.text for s in started]
    names = [s.json()["metadata"]["name"] for s in started]
    wait_until(lambda: all(record(cluster, namespace, n)["status"].get("phase") == "Running"
                           for n in names), "both runs Running", 30)

    cluster.kill_replica(victim)
    killed = time.monotonic()
    wait_until(lambda: all(record(cluster, namespace, n)["status"].get("phase") == "Failed"
                           for n in names), "the killed replica's runs to end",
               TAKEOVER_BOUND_SECONDS)
    ended_after = time.monotonic() - killed
    for n in names:
        status = record(cluster, namespace, n)["status"]
        assert status["reason"] == "Interrupted", status
    print(f"\nHA: the killed replica's 2 running records ended Interrupted "
          f"{ended_after:.1f} s after SIGKILL")
    assert ended_after >= LEASE_DURATION_SECONDS - 1, "ended before the Lease could expire"
    cluster.restart_replica(victim)


def more_answers(outcomes: Sized, count: int) -> None:
    """Wait until the callers' loops have had `count` more answers (each phase of a test
    under load lasts until the load has reached it, however fast or slow the machine)."""
    seen = len(outcomes)
    wait_until(lambda: len(outcomes) >= seen + count, f"{count} more answers", 90)


def test_a_client_loop_through_a_replica_kill_and_a_restart_sees_only_in_flight_failures(
        cluster: Cluster, namespace: str, caller: User) -> None:
    callers = 4
    pods = cluster.deploy(namespace, "loop", replicas=callers, annotations=declare(app=[
        exec_notifier("ping", "sleep 0.2; echo pong")]))
    stop = threading.Event()
    outcomes: list[tuple[float, int]] = []
    unavailable: list[float] = []

    def loop(pod: str) -> None:
        with cluster.client_for(caller, timeout=60) as client:
            while not stop.is_set():
                try:
                    status = client.post(notify_path(namespace, pod),
                                         params={"waitSeconds": "20"},
                                         json=body("ping")).status_code
                except httpx.HTTPError:
                    status = 0
                outcomes.append((time.monotonic(), status))

    def watch_apiservice() -> None:
        while not stop.is_set():
            if not apiservice_available(cluster):
                unavailable.append(time.monotonic())
            time.sleep(0.25)

    threads = [threading.Thread(target=loop, args=(p["metadata"]["name"],)) for p in pods]
    threads.append(threading.Thread(target=watch_apiservice))
    for thread in threads:
        thread.start()
    try:
        more_answers(outcomes, 2 * callers)
        killed_at = time.monotonic()
        cluster.kill_replica(1)
        more_answers(outcomes, 4 * callers)
        cluster.restart_replica(1)
        more_answers(outcomes, 2 * callers)
        restarted_at = time.monotonic()
        cluster.restart_replica(0)  # SIGTERM: a rolling restart's graceful stop
        more_answers(outcomes, 2 * callers)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    statuses = Counter(status for _, status in outcomes)
    # A notify in flight on the killed replica fails (5xx or a dropped connection); its record
    # stays Running until a survivor takes it over after the Lease expires, so that pod's next
    # notifies are 409 meanwhile: not a failure of the service.
    failed = [(at, status) for at, status in outcomes if status not in (201, 409)]
    when = [(round(at - killed_at, 2), status) for at, status in failed]
    print(f"\nHA: {len(outcomes)} notifies through a SIGKILL of replica 1 and a restart of "
          f"replica 0: {dict(statuses)}; failures (seconds after the kill, status) {when}")
    assert statuses[201] > 0
    assert not [s for _, s in failed if s not in (0, 500, 502, 503, 504)], failed
    killed_window = [at for at, _ in failed if killed_at <= at < killed_at + 10]
    assert len(killed_window) == len(failed) <= callers, (
        "only the requests in flight on the killed replica fail")
    assert not [at for at, _ in failed if at >= restarted_at], "a graceful restart fails nothing"
    assert not unavailable, "the APIService stayed Available"


ROLLING_CALLERS = 8
CLIENT_GO_RETRIES = 10
"""client-go's default: it retries a request answered 429 (or 5xx) with Retry-After, any verb,
up to 10 times, after the seconds the header gives."""


def post_as_client_go(client: httpx.Client, path: str, **kwargs: Any
                      ) -> tuple[httpx.Response, int]:
    """POST as client-go's rest.Request does (kubectl's): a 429 with Retry-After is sent again
    after those seconds. Returns the last answer and how many 429s came before it."""
    for retried in range(CLIENT_GO_RETRIES + 1):
        response = client.post(path, **kwargs)
        after = response.headers.get("retry-after", "")
        if response.status_code != 429 or not after.isdigit() or retried == CLIENT_GO_RETRIES:
            return response, retried
        time.sleep(int(after))
    raise AssertionError("unreachable")


def test_a_rolling_restart_under_8_callers_fails_no_notify(
        cluster: Cluster, namespace: str, caller: User) -> None:
    """Each replica in turn gets SIGTERM and starts again, as a Deployment's rolling update
    does, while 8 callers notify in a loop through the aggregator: every answer is 201."""
    pods = cluster.deploy(namespace, "rolling", replicas=ROLLING_CALLERS, annotations=declare(
        app=[exec_notifier("ping", "sleep 0.1; echo pong")]))
    stop = threading.Event()
    outcomes: list[tuple[int, str, float]] = []
    events: list[tuple[str, float]] = []
    late_refusals: list[int] = []

    def loop(pod: str) -> None:
        with cluster.client_for(caller, timeout=60) as client:
            while not stop.is_set():
                try:
                    response, refused = post_as_client_go(
                        client, notify_path(namespace, pod), params={"waitSeconds": "20"},
                        json=body("ping"))
                    outcomes.append((response.status_code, response.text[:300],
                                     time.monotonic()))
                    late_refusals.append(refused)
                except httpx.HTTPError as error:
                    outcomes.append((0, repr(error), time.monotonic()))

    threads = [threading.Thread(target=loop, args=(p["metadata"]["name"],)) for p in pods]
    for thread in threads:
        thread.start()
    try:
        more_answers(outcomes, 2 * ROLLING_CALLERS)
        for replica in range(cluster.replicas):
            cluster.restart_replica(replica)  # SIGTERM, start again, wait until routed
            more_answers(outcomes, 2 * ROLLING_CALLERS)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    statuses = Counter(status for status, _, _ in outcomes)
    print(f"\nHA: {len(outcomes)} notifies by {ROLLING_CALLERS} callers through a rolling "
          f"restart of {cluster.replicas} replicas: {dict(statuses)}; late requests answered "
          f"429 and retried: {sum(late_refusals)}")
    assert statuses[201] > 0
    assert [(status, text, [(what, round(at - then, 2)) for what, then in events])
            for status, text, at in outcomes if status != 201] == []


def test_killing_the_leader_during_a_200_pod_notification_notifies_each_pod_once(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    operator = cluster.user("ha-operator")
    cluster.grant(namespace, operator, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["notifications", "pods/notify"],
         "verbs": ["create", "get", "list", "delete"]},
        # bare pods, each with its own declaration: trusted through pods/exec (trust rule 2)
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}])
    count = 200
    with cluster.admin() as kube:
        for i in range(count):
            pod = f"p{i:03d}"
            script = (f"echo start $(date +%s.%N) >> {shlex.quote(str(tmp_path / pod))}; "
                      f"sleep 0.5; echo done >> {shlex.quote(str(tmp_path / pod))}")
            response = kube.post(f"/api/v1/namespaces/{namespace}/pods", json={
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "labels": {"set": "big"},
                             "annotations": declare(app=[exec_notifier("quiesce", script)])},
                "spec": {"containers": [{"name": "app", "image": "fake.example/app:1"}]}})
            assert response.status_code == 201, response.text
    cluster.wait_running_pods(namespace, "set=big", count, timeout=180)

    with cluster.client_for(operator) as client:
        created = create_notification(client, namespace, notification(
            "big", "quiesce", {"set": "big"}, parallelism=10, failurePolicy="Continue"))
    assert created.status_code == 201, created.text

    def started() -> int:
        return sum(1 for f in tmp_path.iterdir() if f.read_text().startswith("start"))

    wait_until(lambda: started() >= 40, "40 pods notified", 120)
    victim = leader(cluster)
    cluster.kill_replica(victim)
    at_kill = started()
    killed_wall = time.time()
    killed = time.monotonic()
    status = wait_finished(cluster, namespace, "big", timeout=240)["status"]
    finished_after = time.monotonic() - killed

    starts = {f.name: [line for line in f.read_text().splitlines() if line.startswith("start")]
              for f in tmp_path.iterdir()}
    twice = {pod: lines for pod, lines in starts.items() if len(lines) != 1}
    assert not twice, f"pods notified more than once: {twice}"
    counts = status["counts"]
    assert counts["total"] == count
    assert counts["succeeded"] + counts["failed"] == count
    interrupted = {r["spec"]["podName"] for r in records(
        cluster, namespace, labelSelector="notifier.x-k8s.io/notification=big")
        if r["status"].get("reason") == "Interrupted"}
    assert counts["failed"] == len(interrupted), "only runs of the killed leader failed"
    assert status["phase"] == ("Succeeded" if not interrupted else "Failed")
    # Every pod was notified once, except a run the killed leader had begun whose command had
    # not started yet: that pod's record ended Interrupted (it may or may not have run, so it
    # is never run again).
    never = {f"p{i:03d}" for i in range(count)} - set(starts)
    assert never <= interrupted, f"pods never notified, without an Interrupted record: {never}"
    resumed = min(float(lines[0].split()[1]) for lines in starts.values()
                  if float(lines[0].split()[1]) > killed_wall)
    print(f"\nHA: leader replica {victim} killed after {at_kill} of {count} pods had started: "
          f"the new leader started the next pod {resumed - killed_wall:.1f} s after the kill; "
          f"the Notification ended {status['phase']} {counts} {finished_after:.1f} s after "
          f"it; {len(interrupted)} runs ended Interrupted ({len(never)} of them before their "
          "command ran)")
    cluster.restart_replica(victim)


# Records go away with their pods and namespaces


def test_a_deleted_pods_finished_records_disappear(
        cluster: Cluster, namespace: str, caller: User) -> None:
    pod = cluster.create_pod(namespace, "gone", annotations=declare(app=[
        exec_notifier("reload", "echo ok")]))
    name = pod["metadata"]["name"]
    owner = cluster.user("ha-owner")
    cluster.grant(namespace, owner, [NOTIFY, {"apiGroups": [""], "resources": ["pods/exec"],
                                              "verbs": ["create"]}])
    for replica in (0, 1):
        answer = notify_on(cluster, owner, replica, namespace, name, "reload", wait=20)
        assert answer.status_code == 201, answer.text
    assert len(records(cluster, namespace)) == 2
    with cluster.admin() as kube:
        assert kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}",
                           params={"gracePeriodSeconds": "0"}).status_code == 200
    wait_until(lambda: not records(cluster, namespace), "the deleted pod's records to go", 60)


def test_deleting_a_namespace_with_records_completes(cluster: Cluster, caller: User) -> None:
    namespace = cluster.create_namespace("ha-ns")
    cluster.grant(namespace, caller, [NOTIFY, READ_RECORDS])
    (pod,) = cluster.deploy(namespace, "web", annotations=declare(app=[
        exec_notifier("reload", "echo ok")]))
    for replica in (0, 1):
        answer = notify_on(cluster, caller, replica, namespace, pod["metadata"]["name"],
                           "reload", wait=20)
        assert answer.status_code == 201, answer.text
    with cluster.admin() as kube:
        assert kube.delete(f"/api/v1/namespaces/{namespace}").status_code == 200

        def gone() -> bool:
            return kube.get(f"/api/v1/namespaces/{namespace}").status_code == 404

        wait_until(gone, f"namespace {namespace} to be deleted", 90)
