"""The serving certificate reconciler against a fake kube-apiserver that checks
resourceVersions: bootstrap at start, replicas agreeing through conflicts, the APIService's
caBundle kept equal to the Secret's bundle through a CA rotation, every CA in the caBundle
before the Secret holds it, a Secret someone else wrote refused, a requested rotation, and
one-line StartupErrors."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509

from apiserver.certificates import secret as secret_keys
from apiserver.certificates.files import CertDir
from apiserver.certificates.plan import Material, Policy, renewal_time
from apiserver.certificates.reconciler import CertificateBootstrapFailed, ServingCertificates
from apiserver.errors import StartupError
from apiserver.kube import Connection, KubeClient
from certs.authority import KeyPair, issue, new_ca

SECRET_PATH = "/api/v1/namespaces/ns/secrets/serving"
APISERVICE_PATH = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.notifier.x-k8s.io"
POLICY = Policy(service="svc", namespace="ns", serving_validity=datetime.timedelta(hours=1),
                ca_validity=datetime.timedelta(hours=6))
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
CA_KEYS = (secret_keys.CA_CERT, secret_keys.NEXT_CA_CERT, secret_keys.RETIRED_CA_CERT)


def _status(code: int, reason: str, message: str = "") -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "code": code, "reason": reason, "message": message})


class Kube:
    """One Secret and one APIService with resourceVersion checks; `forbidden` paths answer
    403; `before_write` runs before each write is applied (to race another writer in)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {APISERVICE_PATH: {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1alpha1.notifier.x-k8s.io", "resourceVersion": "1"},
            "spec": {"group": "notifier.x-k8s.io", "version": "v1alpha1"}}}
        self.version = 1
        self.forbidden: set[str] = set()
        self.before_write: Callable[[], None] | None = None
        self.conflicts = 0
        self.bundles: list[list[x509.Certificate]] = []
        """Each caBundle the server gave the APIService, in order."""
        self.unpublished: list[str] = []
        """Each key of a Secret the server wrote whose CA the caBundle did not hold then."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path in self.forbidden or (request.method == "POST" and
                                      SECRET_PATH in self.forbidden):
            return _status(403, "Forbidden", f"{request.method} {path} is forbidden")
        if request.method == "GET":
            if path in self.objects:
                return httpx.Response(200, json=self.objects[path])
            return _status(404, "NotFound")
        body = json.loads(request.content)
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        if request.method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                self.conflicts += 1
                return _status(409, "AlreadyExists")
            answer = self.store(path, body, 201)
        else:
            found = self.objects.get(path)
            if found is None:
                return _status(404, "NotFound")
            if body["metadata"].get("resourceVersion") != found["metadata"]["resourceVersion"]:
                self.conflicts += 1
                return _status(409, "Conflict", "the object has been modified")
            answer = self.store(path, body, 200)
        self.stored_by_the_server(path)
        return answer

    def stored_by_the_server(self, path: str) -> None:
        """Record what the server wrote: each caBundle, and a Secret CA not published yet."""
        if path == APISERVICE_PATH:
            self.bundles.append(self.ca_bundle())
        elif path == SECRET_PATH and APISERVICE_PATH not in self.forbidden:
            data = self.secret_data()
            self.unpublished += [key for key in CA_KEYS if key in data and
                                 x509.load_pem_x509_certificate(data[key]) not in self.ca_bundle()]

    def store(self, path: str, body: dict[str, Any], code: int) -> httpx.Response:
        self.version += 1
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        self.objects[path] = body
        return httpx.Response(code, json=body)

    def client(self) -> KubeClient:
        return KubeClient(Connection("https://kube.test", ssl.create_default_context()),
                          transport=httpx.MockTransport(self.handle))

    def secret_data(self) -> dict[str, bytes]:
        return {k: base64.b64decode(v) for k, v in self.objects[SECRET_PATH]["data"].items()}

    def ca_bundle(self) -> list[x509.Certificate]:
        text = self.objects[APISERVICE_PATH]["spec"].get("caBundle", "")
        return x509.load_pem_x509_certificates(base64.b64decode(text)) if text else []


class RecordingCertDir(CertDir):
    """A CertDir that remembers every certificate written to it."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.written: list[x509.Certificate] = []

    def write(self, pair: KeyPair) -> bool:
        self.written.append(pair.cert)
        return super().write(pair)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now


def replica(kube: Kube, directory: Path, clock: Clock, apiservice: str =
            "v1alpha1.notifier.x-k8s.io") -> ServingCertificates:
    return ServingCertificates(kube.client(), POLICY, RecordingCertDir(directory),
                               secret_name="serving", apiservice=apiservice, clock=clock)


def written(certificates: ServingCertificates) -> list[x509.Certificate]:
    cert_dir = certificates.cert_dir
    assert isinstance(cert_dir, RecordingCertDir)
    return cert_dir.written


def served(directory: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())


async def test_start_creates_the_secret_writes_the_files_and_publishes_the_bundle(tmp_path):
    kube, clock = Kube(), Clock()
    material = await replica(kube, tmp_path / "a", clock).start()
    data = kube.secret_data()
    assert sorted(data) == ["ca-bundle.crt", "ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert kube.objects[SECRET_PATH]["type"] == "kubernetes.io/tls"
    assert data["tls.crt"] == (tmp_path / "a" / "tls.crt").read_bytes()
    assert data["tls.key"] == (tmp_path / "a" / "tls.key").read_bytes()
    assert stat.S_IMODE((tmp_path / "a" / "tls.key").stat().st_mode) == 0o600
    assert kube.ca_bundle() == [material.ca.cert]
    assert data["ca-bundle.crt"] == material.bundle_pem()
    # What the files hold loads as a serving pair.
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tmp_path / "a" / "tls.crt",
                                                            tmp_path / "a" / "tls.key")


async def test_two_replicas_starting_at_once_agree_on_one_ca(tmp_path):
    kube, clock = Kube(), Clock()
    a, b = replica(kube, tmp_path / "a", clock), replica(kube, tmp_path / "b", clock)
    first, second = await asyncio.gather(a.start(), b.start())
    assert first.ca.cert == second.ca.cert
    assert served(tmp_path / "a") == served(tmp_path / "b")
    assert kube.ca_bundle() == [first.ca.cert]


async def test_a_replica_takes_the_renewal_another_one_wrote(tmp_path):
    kube, clock = Kube(), Clock()
    a, b = replica(kube, tmp_path / "a", clock), replica(kube, tmp_path / "b", clock)
    await a.start()
    await b.start()
    clock.now = renewal_time(served(tmp_path / "a"))
    await b.reconcile()
    winner = served(tmp_path / "b")
    stale_version = kube.objects[SECRET_PATH]["metadata"]["resourceVersion"]
    assert winner != served(tmp_path / "a")
    await a.reconcile()
    assert served(tmp_path / "a") == winner
    assert kube.objects[SECRET_PATH]["metadata"]["resourceVersion"] == stale_version


async def test_an_update_conflict_plans_again(tmp_path):
    kube, clock = Kube(), Clock()
    a = replica(kube, tmp_path / "a", clock)
    await a.start()
    clock.now = renewal_time(served(tmp_path / "a"))
    before = kube.objects[SECRET_PATH]

    def someone_else_writes() -> None:
        # another writer bumps the Secret's resourceVersion (e.g. a label added)
        obj = kube.objects[SECRET_PATH]
        kube.store(SECRET_PATH, {**obj, "metadata": {**obj["metadata"],
                                                     "labels": {"x": "y"}}}, 200)

    kube.before_write = someone_else_writes
    renewed = await a.reconcile()
    assert kube.conflicts == 1
    assert kube.objects[SECRET_PATH]["metadata"]["labels"] == {"x": "y"}
    assert renewed.serving.cert != x509.load_pem_x509_certificate(
        base64.b64decode(before["data"]["tls.crt"]))
    assert served(tmp_path / "a") == renewed.serving.cert


async def test_a_ca_rotation_publishes_the_next_ca_before_it_signs(tmp_path):
    kube, clock = Kube(), Clock()
    a = replica(kube, tmp_path / "a", clock)
    first = await a.start()
    clock.now = renewal_time(first.ca.cert)
    introduced = await a.reconcile()
    assert introduced.next_ca is not None
    assert kube.ca_bundle() == [first.ca.cert, introduced.next_ca.cert]
    # The publication is recorded once the APIService held the bundle.
    annotations = kube.objects[SECRET_PATH]["metadata"]["annotations"]
    assert annotations["notifier.x-k8s.io/next-ca-published-at"] == clock.now.isoformat(
        timespec="microseconds")
    served(tmp_path / "a").verify_directly_issued_by(first.ca.cert)
    assert "next-ca.crt" in kube.secret_data()

    clock.now += POLICY.overlap
    promoted = await a.reconcile()
    assert promoted.ca.cert == introduced.next_ca.cert
    served(tmp_path / "a").verify_directly_issued_by(introduced.next_ca.cert)
    assert kube.ca_bundle() == [introduced.next_ca.cert, first.ca.cert]
    assert "retired-ca.crt" in kube.secret_data() and "next-ca.crt" not in kube.secret_data()

    assert promoted.retired_ca_until is not None
    clock.now = promoted.retired_ca_until
    done = await a.reconcile()
    assert kube.ca_bundle() == [done.ca.cert] == [introduced.next_ca.cert]
    assert kube.unpublished == []  # each CA was in the caBundle before the Secret held it


async def test_a_cleared_ca_bundle_is_put_back(tmp_path):
    kube, clock = Kube(), Clock()
    a = replica(kube, tmp_path / "a", clock)
    material = await a.start()
    apiservice = kube.objects[APISERVICE_PATH]
    kube.store(APISERVICE_PATH, {**apiservice, "spec": {
        k: v for k, v in apiservice["spec"].items() if k != "caBundle"}}, 200)
    assert kube.ca_bundle() == []
    await a.reconcile()
    assert kube.ca_bundle() == [material.ca.cert]


async def test_without_an_apiservice_none_is_read_or_written(tmp_path):
    kube, clock = Kube(), Clock()
    kube.forbidden.add(APISERVICE_PATH)
    material = await replica(kube, tmp_path / "a", clock, apiservice="").start()
    assert "caBundle" not in kube.objects[APISERVICE_PATH]["spec"]
    clock.now = renewal_time(material.ca.cert)
    # the next CA counts as published once in the Secret
    introduced = await replica(kube, tmp_path / "a", clock, apiservice="").reconcile()
    assert introduced.next_ca_published_at == clock.now


async def test_an_unusable_secret_is_replaced(tmp_path):
    kube, clock = Kube(), Clock()
    kube.store(SECRET_PATH, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                             "metadata": {"name": "serving", "namespace": "ns"},
                             "data": {"tls.crt": "bm9wZQ=="}}, 201)
    material = await replica(kube, tmp_path / "a", clock).start()
    assert kube.objects[SECRET_PATH]["type"] == "Opaque"  # a Secret's type cannot change
    assert kube.secret_data()["ca.crt"] == material.ca.cert_pem()


@pytest.mark.parametrize(("forbidden", "message"), [
    (SECRET_PATH, r"^cannot bootstrap the serving certificate in secret ns/serving \(403 "
     r"Forbidden: GET .* is forbidden\): grant the server's identity get, update on secrets "
     r"named serving and create on secrets in namespace ns \(Role "
     r"container-notifier:serving-cert in apiservice/rbac-server.yaml\), or give "
     r"--tls-cert-file and --tls-private-key-file$"),
    (APISERVICE_PATH, r"^cannot keep the caBundle of APIService v1alpha1.notifier.x-k8s.io "
     r"\(403 Forbidden: .*\): grant the server's identity get, update on apiservices "
     r"\(apiregistration.k8s.io\) named v1alpha1.notifier.x-k8s.io \(ClusterRole "
     r"container-notifier:apiservice-ca-bundle in apiservice/rbac-server.yaml\), or pass "
     r"--apiservice-name='' and set the caBundle yourself$"),
])
async def test_a_refusal_at_start_is_one_line_naming_the_permission(tmp_path, forbidden, message):
    kube, clock = Kube(), Clock()
    kube.forbidden.add(forbidden)
    with pytest.raises(CertificateBootstrapFailed, match=message) as failed:
        await replica(kube, tmp_path / "a", clock).start()
    assert isinstance(failed.value, StartupError)
    assert "\n" not in str(failed.value)


async def test_a_missing_apiservice_at_start_says_to_register_it(tmp_path):
    kube, clock = Kube(), Clock()
    del kube.objects[APISERVICE_PATH]
    with pytest.raises(CertificateBootstrapFailed, match=r"^APIService "
                       r"v1alpha1.notifier.x-k8s.io not found \(404 NotFound: \): register it"):
        await replica(kube, tmp_path / "a", clock).start()


async def test_the_ca_expiration_is_read_for_metrics(tmp_path):
    kube, clock = Kube(), Clock()
    a = replica(kube, tmp_path / "a", clock)
    assert a.ca_expiration() == 0.0
    material = await a.start()
    assert a.ca_expiration() == material.ca.cert.not_valid_after_utc.timestamp()


# What the server trusts in the Secret


def planted_material(now: datetime.datetime) -> Material:
    """A CA and serving certificate for the server's names that someone else made."""
    ca = new_ca("planted-ca", POLICY.ca_validity, now=now)
    return Material(ca=ca, serving=issue(ca, POLICY.dns_names[2], dns_names=POLICY.dns_names,
                                         server=True, validity=POLICY.serving_validity, now=now))


def plant(kube: Kube, material: Material) -> None:
    """Create the Secret as a user allowed only to create Secrets would: with any content and
    metadata (here an owner whose deletion would have the garbage collector delete it)."""
    kube.store(SECRET_PATH, secret_keys.with_material({"metadata": {
        "name": "serving", "namespace": "ns",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "mine",
                             "uid": "u-1"}]}}, material), 201)


def never_trusted(kube: Kube, replicas: list[ServingCertificates], ca: KeyPair) -> None:
    """`ca` was in no caBundle the server wrote, and no replica wrote a certificate it
    signed to its --cert-dir."""
    assert all(ca.cert not in bundle for bundle in kube.bundles)
    assert all(cert.issuer != ca.cert.subject for r in replicas for cert in written(r))


async def test_a_secret_planted_while_it_was_deleted_is_refused(tmp_path, caplog):
    """The Secret is deleted (as a forced rotation once was) and someone allowed only to
    create Secrets creates it first: the replica refuses it, keeps serving its pair, and
    writes a new CA of its own over it, published before the Secret holds it."""
    kube, clock = Kube(), Clock()
    a = replica(kube, tmp_path / "a", clock)
    first = await a.start()
    del kube.objects[SECRET_PATH]
    planted = planted_material(clock.now)
    plant(kube, planted)

    replaced = await a.reconcile()

    never_trusted(kube, [a], planted.ca)
    assert replaced.ca.cert not in (planted.ca.cert, first.ca.cert)
    assert kube.secret_data()["ca.crt"] == replaced.ca.cert_pem()
    assert kube.ca_bundle() == [replaced.ca.cert]
    assert kube.unpublished == []
    assert "ownerReferences" not in kube.objects[SECRET_PATH]["metadata"]
    assert a.refused == 1
    (warning,) = [r for r in caplog.records if "not trusted" in r.getMessage()]
    assert warning.untrusted_cas == ["CN=planted-ca"]
    assert served(tmp_path / "a") == replaced.serving.cert


async def test_a_secret_planted_before_the_first_start_is_refused(tmp_path):
    kube, clock = Kube(), Clock()
    planted = planted_material(clock.now)
    plant(kube, planted)
    a = replica(kube, tmp_path / "a", clock)

    material = await a.start()

    never_trusted(kube, [a], planted.ca)
    assert material.ca.cert != planted.ca.cert
    assert kube.ca_bundle() == [material.ca.cert]
    assert a.refused == 1


@pytest.mark.parametrize("key", ["next-ca", "retired-ca"])
async def test_a_ca_added_to_the_secret_is_refused(tmp_path, key):
    """Someone allowed to patch the Secret adds a CA of theirs as the next CA (with its key:
    promoted, it would sign) or as a retired one (trusted until a time they choose), keeping
    the server's CA: the Secret is refused all the same, and that CA is never published."""
    kube, clock = Kube(), Clock()
    a, b = replica(kube, tmp_path / "a", clock), replica(kube, tmp_path / "b", clock)
    first = await a.start()
    await b.start()
    theirs = planted_material(clock.now).ca
    secret = kube.objects[SECRET_PATH]
    added = {"next-ca.crt": theirs.cert_pem(), "next-ca.key": theirs.key_pem()} \
        if key == "next-ca" else {"retired-ca.crt": theirs.cert_pem()}
    annotations = {} if key == "next-ca" else {
        secret_keys.RETIRED_UNTIL: (clock.now + datetime.timedelta(days=3650)).isoformat()}
    kube.store(SECRET_PATH, {**secret, "metadata": {**secret["metadata"], "annotations": {
        **(secret["metadata"].get("annotations") or {}), **annotations}},
        "data": {**secret["data"], **{k: base64.b64encode(v).decode()
                                      for k, v in added.items()}}}, 200)

    replaced, other = await a.reconcile(), await b.reconcile()

    never_trusted(kube, [a, b], theirs)
    assert replaced.ca.cert not in (first.ca.cert, theirs.cert)
    assert other.serving.cert == replaced.serving.cert and b.refused == 0  # a's, taken
    assert a.refused == 1
    assert kube.ca_bundle() == [replaced.ca.cert]


async def test_a_requested_rotation_replaces_the_ca_after_publishing_the_new_one(tmp_path):
    kube, clock = Kube(), Clock()
    a, b = replica(kube, tmp_path / "a", clock), replica(kube, tmp_path / "b", clock)
    first = await a.start()
    await b.start()
    secret = kube.objects[SECRET_PATH]
    kube.store(SECRET_PATH, {**secret, "metadata": {**secret["metadata"], "annotations": {
        secret_keys.ROTATE: "now", "kept": "x"}}}, 200)

    rotated = await a.reconcile()
    taken = await b.reconcile()

    assert rotated.ca.cert != first.ca.cert and rotated.next_ca is None
    assert taken.serving.cert == rotated.serving.cert and (a.refused, b.refused) == (0, 0)
    assert served(tmp_path / "b") == rotated.serving.cert
    # The new CA joined the caBundle before the Secret held it; then the old CA left.
    assert kube.bundles[-2:] == [[first.ca.cert, rotated.ca.cert], [rotated.ca.cert]]
    assert kube.unpublished == []
    assert kube.objects[SECRET_PATH]["metadata"]["annotations"] == {"kept": "x"}
    assert (await a.reconcile()).ca.cert == rotated.ca.cert  # the request was consumed


async def test_two_replicas_honour_one_requested_rotation_with_one_ca(tmp_path):
    kube, clock = Kube(), Clock()
    a, b = replica(kube, tmp_path / "a", clock), replica(kube, tmp_path / "b", clock)
    first = await a.start()
    await b.start()
    secret = kube.objects[SECRET_PATH]
    kube.store(SECRET_PATH, {**secret, "metadata": {**secret["metadata"], "annotations": {
        secret_keys.ROTATE: "now"}}}, 200)

    left, right = await asyncio.gather(a.reconcile(), b.reconcile())

    assert left.ca.cert == right.ca.cert != first.ca.cert
    assert kube.ca_bundle() == [left.ca.cert]
    assert (a.refused, b.refused) == (0, 0)
    assert kube.unpublished == []


async def test_a_cleared_ca_bundle_found_at_start_means_a_new_ca(tmp_path):
    """A replica that starts while the caBundle holds none of the Secret's CAs cannot tell
    the Secret from one someone else wrote: it makes a new CA (a replica that ran before puts
    its bundle back instead, test_a_cleared_ca_bundle_is_put_back)."""
    kube, clock = Kube(), Clock()
    first = await replica(kube, tmp_path / "a", clock).start()
    apiservice = kube.objects[APISERVICE_PATH]
    kube.store(APISERVICE_PATH, {**apiservice, "spec": {
        k: v for k, v in apiservice["spec"].items() if k != "caBundle"}}, 200)
    restarted = replica(kube, tmp_path / "a", clock)

    material = await restarted.start()

    assert material.ca.cert != first.ca.cert
    assert kube.ca_bundle() == [material.ca.cert]
    assert restarted.refused == 1


async def test_without_an_apiservice_the_secret_is_taken_as_found(tmp_path):
    """With --apiservice-name='' the server has no record of the CAs it made to check the
    Secret against: whoever keeps the caBundle copies the Secret's bundle."""
    kube, clock = Kube(), Clock()
    kube.forbidden.add(APISERVICE_PATH)
    planted = planted_material(clock.now)
    plant(kube, planted)
    a = replica(kube, tmp_path / "a", clock, apiservice="")
    assert (await a.start()).ca.cert == planted.ca.cert
    assert a.refused == 0
