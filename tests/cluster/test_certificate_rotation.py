"""The built-in serving certificate bootstrap on a plane of its own whose certificates live
seconds (docs/certificates.md): two replicas starting at once agree on one Secret, and through
the aggregator (kube-apiserver -> APIService -> HAProxy -> 2 replicas) requests as a real user
keep succeeding, and a watch opened before keeps delivering, while the serving certificate is
renewed and the CA rotated, the APIService's caBundle holding the old and the new CA between;
a forced rotation by annotation; and a Secret someone else created refused.

The figures measured (how long each change of the Secret took to be served by both replicas and
to reach the APIService) are printed; run with -s to see them."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shlex
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from cryptography import x509

from certs.authority import issue, new_ca
from localcluster import __main__ as localcluster
from localcluster import plane, processes
from localcluster.notifier import APISERVICE_NAME, NOTIFIER_NAMESPACE
from localcluster.pki import NOTIFIER_SERVICE
from tests.support.doc_commands import console_commands
from tests.support.kube import Cluster, User, wait_until
from tests.support.notify import API, declare, exec_notifier, notify
from tests.support.planes import extra_plane

pytestmark = pytest.mark.cluster

SERVING_VALIDITY_SECONDS = 20
CA_VALIDITY_SECONDS = 60
ROTATION_ARGS = [f"--serving-cert-validity={SERVING_VALIDITY_SECONDS}s",
                 f"--serving-cert-ca-validity={CA_VALIDITY_SECONDS}s"]
"""Renewal every ~13 s; a next CA after ~38 s, signing ~10 s after its bundle is published; the
retired CA dropped when its last certificate expires, within 20 s."""
SECRETS = f"/api/v1/namespaces/{NOTIFIER_NAMESPACE}/secrets"
SECRET = f"{SECRETS}/container-notifier-serving-cert"
APISERVICE = f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE_NAME}"
ROTATION_DEADLINE_SECONDS = 150.0


@pytest.fixture(scope="module")
def rotation() -> Iterator[Cluster]:
    with extra_plane("rotation", server_args=ROTATION_ARGS) as plane:
        yield plane


def served(cluster: Cluster, replica: int) -> x509.Certificate | None:
    """The certificate replica `replica` presents to a new connection (not verified)."""
    try:
        pem = ssl.get_server_certificate(("127.0.0.1", cluster.replica_port(replica)),
                                         timeout=2)
    except OSError:
        return None
    return x509.load_pem_x509_certificate(pem.encode())


def secret_certificates(kube: httpx.Client) -> tuple[x509.Certificate, list[x509.Certificate]]:
    data = kube.get(SECRET).raise_for_status().json()["data"]
    return (x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"])),
            x509.load_pem_x509_certificates(base64.b64decode(data["ca-bundle.crt"])))


def published(kube: httpx.Client) -> list[x509.Certificate]:
    spec = kube.get(APISERVICE).raise_for_status().json()["spec"]
    return x509.load_pem_x509_certificates(base64.b64decode(spec["caBundle"]))


def test_two_replicas_starting_at_once_agree_on_one_secret(rotation: Cluster) -> None:
    creations = [line for replica in range(rotation.replicas)
                 for line in processes.log_path(rotation.layout.logs,
                                                f"notifier-apiserver-{replica}").read_text()
                 .splitlines() if "serving certificate Secret: created" in line]
    assert len(creations) == 1, creations
    with rotation.admin() as kube:
        serving, bundle = secret_certificates(kube)
        assert published(kube) == bundle
    # Both serve a certificate of the one CA (the Secret's, or the one it had just before).
    for replica in range(rotation.replicas):
        cert = served(rotation, replica)
        assert cert is not None
        assert cert.issuer == serving.issuer or any(cert.issuer == ca.subject for ca in bundle)


@dataclass
class Observed:
    """What the monitor saw, each with the monotonic time it was first seen."""

    secret: dict[int, float] = field(default_factory=dict)
    """tls.crt serial -> when the Secret held it."""
    issuers: dict[int, str] = field(default_factory=dict)
    replicas: list[dict[int, float]] = field(default_factory=lambda: [{}, {}])
    """Per replica: serial served -> when first served."""
    bundles: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    """(when, serials of the CAs) each time the APIService's caBundle changed."""
    secret_bundles: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)


def monitor(cluster: Cluster, seen: Observed, stop: threading.Event) -> None:
    with cluster.admin(timeout=5.0) as kube:
        while not stop.is_set():
            now = time.monotonic()
            try:
                serving, bundle = secret_certificates(kube)
                cas = tuple(ca.serial_number for ca in published(kube))
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            seen.secret.setdefault(serving.serial_number, now)
            seen.issuers.setdefault(serving.serial_number, serving.issuer.rfc4514_string())
            in_secret = tuple(ca.serial_number for ca in bundle)
            if not seen.secret_bundles or seen.secret_bundles[-1][1] != in_secret:
                seen.secret_bundles.append((now, in_secret))
            if not seen.bundles or seen.bundles[-1][1] != cas:
                seen.bundles.append((now, cas))
            for replica in range(cluster.replicas):
                cert = served(cluster, replica)
                if cert is not None:
                    seen.replicas[replica].setdefault(cert.serial_number, time.monotonic())
            time.sleep(0.2)


def load(client: httpx.Client, path: str, counts: dict[str, int], failures: list[str],
         stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            response = client.get(path)
            ok = response.status_code == 200
            detail = f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as error:
            ok, detail = False, f"{type(error).__name__}: {error}"
        counts["requests"] += 1
        if not ok:
            failures.append(detail)
        time.sleep(0.05)


def watch_events(client: httpx.Client, path: str, events: queue.Queue[dict[str, Any]],
                 opened: threading.Event) -> None:
    try:
        with client.stream("GET", path, params={"watch": "true", "timeoutSeconds": "600"},
                           timeout=httpx.Timeout(10.0, read=600.0)) as stream:
            opened.set()
            for line in stream.iter_lines():
                if line.strip():
                    events.put(json.loads(line))
    except httpx.HTTPError as error:
        events.put({"type": "CLOSED", "error": str(error)})
    events.put({"type": "CLOSED"})


def next_added(events: queue.Queue[dict[str, Any]], timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = events.get(timeout=max(deadline - time.monotonic(), 0.1))
        assert event["type"] != "CLOSED", f"the watch ended: {event}"
        if event["type"] == "ADDED":
            return event
    raise AssertionError("no ADDED event")


def rotated(seen: Observed, first_issuer: str) -> bool:
    """A renewal by the same CA and a serving certificate of a new CA, both served by both
    replicas, and the Secret's current one served by both."""
    same_ca = [s for s, issuer in seen.issuers.items() if issuer == first_issuer]
    new_ca = [s for s, issuer in seen.issuers.items() if issuer != first_issuer]
    current = max(seen.secret, key=seen.secret.__getitem__)
    return (len(same_ca) >= 2 and bool(new_ca)
            and all(current in served for served in seen.replicas))


def test_rotations_through_the_aggregator_lose_no_request(rotation: Cluster) -> None:
    namespace = rotation.create_namespace("rotation")
    user = rotation.user("rotation-user")
    rotation.grant(namespace, user, [
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["pods/notify"], "verbs": ["create"]},
        {"apiGroups": ["notifier.x-k8s.io"], "resources": ["podnotifiers"],
         "verbs": ["get", "list", "watch"]}])
    (deployed,) = rotation.deploy(namespace, "app", annotations=declare(
        app=[exec_notifier("reload", "true")]))
    pod = deployed["metadata"]["name"]
    collection = f"{API}/namespaces/{namespace}/podnotifiers"
    seen, stop = Observed(), threading.Event()
    counts, failures = {"requests": 0}, []
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    opened = threading.Event()
    with rotation.client_for(user, timeout=15.0) as client, \
            rotation.client_for(user, timeout=15.0) as watcher, \
            rotation.client_for(user, timeout=30.0) as notifier:
        wait_until(lambda: client.get(collection).status_code == 200,
                   "the user to list podnotifiers through the aggregator", 60)
        threads = [threading.Thread(target=monitor, args=(rotation, seen, stop)),
                   threading.Thread(target=load, args=(client, collection, counts, failures,
                                                       stop)),
                   threading.Thread(target=watch_events, args=(watcher, collection, events,
                                                               opened), daemon=True)]
        for thread in threads:
            thread.start()
        try:
            assert opened.wait(30), "the watch through the aggregator did not open"
            before = notify(notifier, namespace, pod, "reload")
            assert before.status_code == 201, before.text
            assert next_added(events)["object"]["metadata"]["name"] == (
                before.json()["metadata"]["name"])
            wait_until(lambda: bool(seen.issuers), "the monitor's first look", 30)
            first_issuer = next(iter(seen.issuers.values()))
            started = time.monotonic()
            wait_until(lambda: rotated(seen, first_issuer),
                       "a serving renewal and a CA rotation served by both replicas",
                       ROTATION_DEADLINE_SECONDS, interval=1.0)
            # ... and the retired CA leaves the bundle once its last certificate expired.
            wait_until(lambda: len(seen.bundles[-1][1]) == 1
                       and any(len(cas) == 2 for _, cas in seen.bundles),
                       "the retired CA to leave the APIService's caBundle", 60, interval=0.5)
            rotation_seconds = time.monotonic() - started
            after = notify(notifier, namespace, pod, "reload")
            assert after.status_code == 201, after.text
            # The watch opened before the rotations still delivers.
            assert next_added(events)["object"]["metadata"]["name"] == (
                after.json()["metadata"]["name"])
        finally:
            stop.set()
            for thread in threads[:2]:
                thread.join(30)
    report(seen, counts["requests"], failures, rotation_seconds)
    assert counts["requests"] > 100
    assert failures == [], failures[:5]
    # The aggregator was given old and new CA together before the new one signed, and the new
    # one alone after the old one's last certificate expired.
    first_ca = seen.bundles[0][1][0]
    new_cas = {ca for _, cas in seen.bundles for ca in cas} - {first_ca}
    assert any(len(cas) >= 2 and first_ca in cas and set(cas) & new_cas
               for _, cas in seen.bundles), seen.bundles
    assert seen.bundles[-1][1][0] in new_cas
    # Both replicas end serving the same certificate, the Secret's.
    with rotation.admin() as kube:
        serving, _ = secret_certificates(kube)
    wait_until(lambda: all(served(rotation, r) == serving for r in range(rotation.replicas)),
               "both replicas to serve the Secret's certificate", 10)


def report(seen: Observed, requests: int, failures: list[str], seconds: float) -> None:
    """Print how long each Secret change took to be served by each replica."""
    print(f"\nrotation: {requests} requests through the aggregator, {len(failures)} failed, "
          f"in {seconds:.0f} s of rotations")
    for serial, at in sorted(seen.secret.items(), key=lambda item: item[1]):
        delays = [f"{served[serial] - at:+.2f}s" if serial in served else "never"
                  for served in seen.replicas]
        print(f"  serving {serial:x} ({seen.issuers[serial]}): in the Secret at "
              f"{at - min(seen.secret.values()):.1f}s, served by the replicas after "
              f"{', '.join(delays)}")
    for at, cas in seen.secret_bundles:
        published_at = next((t for t, b in seen.bundles if b == cas and t >= at - 1), None)
        lag = f"{published_at - at:+.2f}s" if published_at is not None else "never"
        print(f"  Secret bundle of {len(cas)} CA(s) at {at - min(seen.secret.values()):.1f}s: "
              f"in the APIService after {lag}")


def run_documented(cluster: Cluster, command: str) -> str:
    """A docs page's kubectl command, run against `cluster` as admin."""
    assert command.startswith("kubectl "), command
    kubectl = (f"{shlex.quote(str(cluster.bins / 'kubectl'))} "
               f"--kubeconfig={shlex.quote(str(cluster.layout.kubeconfig))}")
    done = subprocess.run(kubectl + command.removeprefix("kubectl"), shell=True,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def secret_creator(cluster: Cluster) -> User:
    """A user allowed only to create Secrets in the server's namespace, once RBAC lets them
    (the serving Secret exists, so their create is answered 409, not 403)."""
    user = cluster.user("secret-creator")
    cluster.grant(NOTIFIER_NAMESPACE, user, [{"apiGroups": [""], "resources": ["secrets"],
                                              "verbs": ["create"]}])
    body, _ = planted_secret()
    with cluster.client_for(user) as client:
        wait_until(lambda: client.post(SECRETS, json=body).status_code == 409,
                   "the Secret creator's RoleBinding to take effect", 15)
    return user


def planted_secret() -> tuple[dict[str, Any], x509.Certificate]:
    """The serving Secret as someone else would make it: a CA of theirs and a serving
    certificate it issued for the server's names, under the keys the server reads. And that
    CA."""
    ca = new_ca("planted-ca")
    base = f"{NOTIFIER_SERVICE}.{NOTIFIER_NAMESPACE}"
    names = (NOTIFIER_SERVICE, base, f"{base}.svc", f"{base}.svc.cluster.local")
    serving = issue(ca, names[2], dns_names=names, server=True)
    data = {"tls.crt": serving.cert_pem(), "tls.key": serving.key_pem(),
            "ca.crt": ca.cert_pem(), "ca.key": ca.key_pem(), "ca-bundle.crt": ca.cert_pem()}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET.rpartition("/")[2], "namespace": NOTIFIER_NAMESPACE},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}, ca.cert


def sightings(cluster: Cluster, ca: x509.Certificate, stop: threading.Event,
              seen: list[str]) -> None:
    """Until `stop`: note each time the APIService's caBundle holds `ca`, or a replica serves a
    certificate `ca` issued."""
    with cluster.admin(timeout=5.0) as kube:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                if ca in published(kube):
                    seen.append("the APIService's caBundle")
            for replica in range(cluster.replicas):
                cert = served(cluster, replica)
                if cert is not None and cert.issuer == ca.subject:
                    seen.append(f"replica {replica}")
            time.sleep(0.1)


def replaced(cluster: Cluster, before: list[x509.Certificate]) -> bool:
    """The Secret holds one CA, not one of `before`, which the APIService's caBundle holds
    alone, and both replicas serve the Secret's certificate."""
    with cluster.admin() as kube:
        if kube.get(SECRET).status_code != 200:
            return False
        serving, bundle = secret_certificates(kube)
        return (len(bundle) == 1 and bundle[0] not in before and published(kube) == bundle
                and all(served(cluster, r) == serving for r in range(cluster.replicas)))


def test_forcing_a_rotation_replaces_the_ca(rotation: Cluster) -> None:
    """The documented annotation replaces the CA, and a user allowed only to create Secrets
    in the server's namespace, trying all along to create the Secret with a CA of theirs, is
    refused each time: the Secret is never missing."""
    creator = secret_creator(rotation)
    body, theirs = planted_secret()
    with rotation.admin() as kube:
        _, before = secret_certificates(kube)
    (printed,) = [run_documented(rotation, c) for c in console_commands(
        "docs/certificates.md", "Forcing a rotation") if " get secret " in c]
    assert x509.load_pem_x509_certificate(base64.b64decode(printed)).issuer == before[0].subject
    stop, seen, answers = threading.Event(), [], []

    def keep_creating() -> None:
        with rotation.client_for(creator, timeout=5.0) as client:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    answers.append(client.post(SECRETS, json=body).status_code)
                time.sleep(0.02)

    threads = [threading.Thread(target=sightings, args=(rotation, theirs, stop, seen)),
               threading.Thread(target=keep_creating)]
    for thread in threads:
        thread.start()
    try:
        for command in console_commands("docs/certificates.md", "Forcing a rotation"):
            if " annotate secret " in command:
                run_documented(rotation, command)
        wait_until(lambda: replaced(rotation, before),
                   "a new CA in the Secret, the APIService and both replicas", 30)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    with rotation.admin() as kube:
        annotations = kube.get(SECRET).json()["metadata"].get("annotations") or {}
    assert "notifier.x-k8s.io/rotate-ca" not in annotations  # the request was honoured
    assert answers and set(answers) == {409}, answers
    assert seen == []
    wait_until(lambda: localcluster.apiservice_available(rotation.layout, rotation.ports),
               "the APIService to be Available", 30)
    with rotation.admin() as kube:
        assert kube.get(API).status_code == 200


@contextlib.contextmanager
def replicas_paused(cluster: Cluster) -> Iterator[None]:
    """Every server replica stopped (SIGSTOP) inside the block and resumed (SIGCONT) after:
    what happens meanwhile, they see afterwards, all at once."""
    replicas = plane.replicas(cluster.layout)
    for replica in replicas:
        os.kill(replica.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for replica in replicas:
            os.kill(replica.pid, signal.SIGCONT)


def refusals(cluster: Cluster, replica: int) -> list[str]:
    """The lines of replica `replica`'s log that refuse the planted Secret."""
    log = processes.log_path(cluster.layout.logs, f"notifier-apiserver-{replica}")
    return [line for line in log.read_text().splitlines()
            if "serving certificate Secret not trusted" in line and "planted-ca" in line]


def test_a_secret_planted_while_it_was_deleted_is_refused(rotation: Cluster) -> None:
    """The Secret is deleted (as a forced rotation once was done) and a user allowed only to
    create Secrets creates it first, with a CA of theirs (the replicas are paused meanwhile,
    so they cannot create it first): the replicas refuse it, its CA never enters the
    APIService's caBundle and no replica serves a certificate it issued; a new CA of the
    server's replaces it."""
    creator = secret_creator(rotation)
    body, theirs = planted_secret()
    with rotation.admin() as kube:
        _, before = secret_certificates(kube)
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=sightings, args=(rotation, theirs, stop, seen))
    watcher.start()
    try:
        with replicas_paused(rotation):
            with rotation.admin() as kube:
                kube.delete(SECRET).raise_for_status()
            with rotation.client_for(creator) as client:
                planted = client.post(SECRETS, json=body)
            assert planted.status_code == 201, planted.text
        wait_until(lambda: replaced(rotation, [*before, theirs]),
                   "a new CA of the server's in the Secret, the APIService and both replicas",
                   30)
        # The replica that replaced it refused it first. Each pass reads the Secret afresh, so
        # a replica resumed after the replacement never reads the planted one: no replica
        # needs to have refused it but one.
        wait_until(lambda: any(refusals(rotation, replica)
                               for replica in range(rotation.replicas)),
                   "a replica to log its refusal of the planted Secret", 30)
    finally:
        stop.set()
        watcher.join(30)
    assert seen == []
    wait_until(lambda: localcluster.apiservice_available(rotation.layout, rotation.ports),
               "the APIService to be Available", 30)
    with rotation.admin() as kube:
        assert kube.get(API).status_code == 200
