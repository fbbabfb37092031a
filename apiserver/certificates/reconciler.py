"""Keep the serving certificate Secret, the files in --cert-dir and the APIService's caBundle
as `plan` says, with every replica doing the same at once.

Replicas agree through the Secret with optimistic concurrency: a create that finds the Secret
made (409) and an update whose resourceVersion is stale (409) re-read it and plan again from
what the other replica wrote, so exactly one CA and one serving pair win. The APIService is
updated the same way (resourceVersion-conditional). Each pass reads both objects afresh.

The APIService's caBundle is also the record of the CAs the server made: anyone allowed to
create Secrets in the namespace could create this one in a moment it does not exist, and
anyone allowed to patch it could add a CA to it, but the caBundle of a cluster-scoped
APIService only the server (and cluster administrators) may write. So a CA enters the caBundle
before the Secret holds it (the server publishes what it made, then writes the Secret), and a
Secret is planned from only if every CA it asks to trust is in the caBundle or is one this
replica made or trusted itself (`_strangers`). Any other content is refused (logged, counted in
`refused`, never written to --cert-dir) and replaced by a new CA of the server's own, as if
there were no Secret. The annotation `secret.ROTATE` asks for a new CA the same way.

`start` runs passes before the server listens (it must have a certificate to serve) and turns
a refusal into a one-line StartupError naming the permission to grant. `run` then keeps them in
sync: an informer on the Secret and one on the APIService (a field selector on each name) wake
it when another replica or a user changes them, and it sleeps otherwise until the next renewal
is due (at most `resync_seconds`). Informers rather than a GET poll, so a rotation one replica
writes reaches the others within a round trip, and a caBundle someone clears is put back at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

from cryptography import x509

from apiserver.certificates import secret as secret_keys
from apiserver.certificates.files import CertDir
from apiserver.certificates.plan import Material, Policy, next_due, pem_bundle, plan
from apiserver.errors import StartupError
from apiserver.kube import KubeClient, KubeRejected, KubeUnavailable, paths
from apiserver.kube.informer import Backoff, Handlers, Informer

log = logging.getLogger(__name__)

APIREGISTRATION = "/apis/apiregistration.k8s.io/v1"
MAX_PASSES = 10
"""Conflicts (and the publication step of a CA rotation) re-run a pass; more than this many in
one reconcile means something else keeps writing the objects."""
RESYNC_SECONDS = 300.0
"""The longest the loop sleeps without an event before it reads both objects again."""
RETRY_SECONDS = 5.0
"""After a failed pass, the loop tries again this soon (informer events may wake it sooner)."""
STARTUP_ATTEMPTS = 6
"""At start, an unreachable kube-apiserver is retried this many times (backing off) before the
server gives up."""

Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CertificateBootstrapFailed(StartupError):
    """The serving certificate cannot be bootstrapped at start; the message names the object,
    kube-apiserver's answer and what to do (which permission to grant)."""


class ConflictsPersist(Exception):
    """A reconcile lost `MAX_PASSES` write races in a row."""


class Refused(Exception):
    """kube-apiserver refused a read or write of the Secret (`on_apiservice` False) or of the
    APIService: its answer is `error`."""

    def __init__(self, error: KubeRejected, *, on_apiservice: bool):
        super().__init__(str(error))
        self.error = error
        self.on_apiservice = on_apiservice


def _decode_bundle(text: str | None) -> tuple[x509.Certificate, ...]:
    if not text:
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(base64.b64decode(text, validate=True)))
    except (binascii.Error, ValueError):
        return ()


class ServingCertificates:
    """The bootstrap's reconciler (see the module docstring). `apiservice` is the APIService
    whose spec.caBundle to keep equal to the Secret's bundle ("" = none); `clock` is for
    tests."""

    def __init__(self, kube: KubeClient, policy: Policy, cert_dir: CertDir, *,
                 secret_name: str, apiservice: str = "", clock: Clock = utc_now,
                 resync_seconds: float = RESYNC_SECONDS, retry_seconds: float = RETRY_SECONDS,
                 backoff: Backoff | None = None):
        self._kube = kube
        self._policy = policy
        self.cert_dir = cert_dir
        self._namespace = policy.namespace
        self._name = secret_name
        self._apiservice = apiservice
        self._clock = clock
        self._resync_seconds = resync_seconds
        self._retry_seconds = retry_seconds
        self._backoff = backoff
        self._secrets = paths.namespaced(paths.CORE, policy.namespace, "secrets")
        self._secret_path = paths.namespaced(paths.CORE, policy.namespace, "secrets",
                                             secret_name)
        self.material: Material | None = None
        """What the last successful pass left in the Secret (and in --cert-dir)."""
        self.refused = 0
        """Passes that found a Secret asking to trust a CA the server did not publish."""

    @property
    def secret(self) -> str:
        return f"{self._namespace}/{self._name}"

    def ca_expiration(self) -> float:
        """The signing CA's notAfter as a Unix time (0 before the first pass), for metrics."""
        if self.material is None:
            return 0.0
        return self.material.ca.cert.not_valid_after_utc.timestamp()

    # one reconcile

    async def reconcile(self) -> Material:
        """Read the Secret and the APIService, publish the CAs the plan adds, write what the
        plan changes, write the serving pair to --cert-dir and publish the bundle; re-run on a
        conflict. Raises Refused or KubeUnavailable as kube-apiserver answers, ConflictsPersist
        after MAX_PASSES."""
        for _ in range(MAX_PASSES):
            found = await self._read_secret()
            apiservice = await self._read_apiservice() if self._apiservice else None
            published = (_decode_bundle((apiservice.get("spec") or {}).get("caBundle"))
                         if apiservice is not None else None)
            current = self._usable(found)
            if found is not None and current is not None and self._refused(current, published):
                current, found = None, secret_keys.disowned(found)
            desired = plan(current, self._clock(), self._policy, published)
            if apiservice is not None and published is not None:
                unpublished = tuple(ca for ca in desired.trusted() if ca not in published)
                if unpublished:
                    apiservice = await self._publish(apiservice, published + unpublished)
                    if apiservice is None:
                        continue
                    published += unpublished
            if found is None or not secret_keys.holds(found, desired):
                if not await self._write_secret(found, desired):
                    continue
                self._log_change(found, current, desired)
            self.cert_dir.write(desired.serving)
            self.material = desired
            if apiservice is not None and published != desired.trusted():
                if await self._publish(apiservice, desired.trusted()) is None:
                    continue
            if (apiservice is not None and desired.next_ca is not None
                    and desired.next_ca_published_at is None):
                continue  # record the publication in the Secret
            return desired
        raise ConflictsPersist(f"secret {self.secret} and APIService {self._apiservice or '-'}: "
                               f"{MAX_PASSES} write conflicts in a row")

    def _usable(self, found: Mapping[str, Any] | None) -> Material | None:
        """What `found` holds; None when there is no Secret, a rotation is requested or its
        content is unusable."""
        if found is None:
            return None
        requested = secret_keys.rotation_requested(found)
        if requested is not None:
            log.info("serving certificate Secret: a new CA was requested; replacing the CA "
                     "without an overlap", extra={"secret": self.secret,
                                                  "annotation": secret_keys.ROTATE,
                                                  "value": requested})
            return None
        try:
            return secret_keys.decode(found)
        except secret_keys.UnusableSecret as error:
            log.warning("serving certificate Secret unusable; replacing its content with a new "
                        "CA and certificate", extra={"secret": self.secret, "error": str(error)})
            return None

    def _refused(self, material: Material, published: tuple[x509.Certificate, ...] | None
                 ) -> bool:
        """Whether the Secret's `material` asks to trust a CA the server cannot vouch for
        (`_strangers`): then it is logged and counted, and not planned from."""
        strangers = self._strangers(material, published)
        if strangers:
            self.refused += 1
            log.warning("serving certificate Secret not trusted: it asks to trust a CA the "
                        "server did not put into the APIService's caBundle (another writer "
                        "created or changed it); not served, replacing its content with a new "
                        "CA and certificate of the server's own", extra={
                            "secret": self.secret, "apiservice": self._apiservice,
                            "untrusted_cas": [ca.subject.rfc4514_string() for ca in strangers]})
        return bool(strangers)

    def _strangers(self, material: Material, published: tuple[x509.Certificate, ...] | None
                   ) -> list[x509.Certificate]:
        """The CAs `material` asks to trust that the server cannot vouch for: neither in the
        APIService's caBundle (`published`) nor made or trusted by this replica before (a
        caBundle someone cleared is put back). With no APIService managed there is nothing
        to check against: none."""
        if published is None:
            return []
        known = self.material.trusted() if self.material is not None else ()
        return [ca for ca in material.trusted() if ca not in published and ca not in known]

    async def _read_secret(self) -> dict[str, Any] | None:
        try:
            return await self._kube.get(self._secret_path)
        except KubeRejected as error:
            if error.status_code == 404:
                return None
            raise Refused(error, on_apiservice=False) from None

    async def _read_apiservice(self) -> dict[str, Any]:
        try:
            return await self._kube.get(f"{APIREGISTRATION}/apiservices/"
                                        f"{paths.segment(self._apiservice)}")
        except KubeRejected as error:
            raise Refused(error, on_apiservice=True) from None

    async def _write_secret(self, found: Mapping[str, Any] | None, desired: Material) -> bool:
        """Create or (resourceVersion-conditionally) update the Secret; False on a conflict."""
        try:
            if found is None:
                await self._kube.post(self._secrets, secret_keys.with_material(
                    {"metadata": {"name": self._name, "namespace": self._namespace}}, desired))
            else:
                await self._kube.put(self._secret_path, secret_keys.with_material(found, desired))
        except KubeRejected as error:
            if error.status_code == 409:
                log.info("serving certificate Secret changed by another writer; planning again",
                         extra={"secret": self.secret})
                return False
            raise Refused(error, on_apiservice=False) from None
        return True

    async def _publish(self, apiservice: Mapping[str, Any],
                       cas: tuple[x509.Certificate, ...]) -> dict[str, Any] | None:
        """Set the APIService's caBundle to `cas` (resourceVersion-conditional): the APIService
        written, or None on a conflict."""
        spec = {**(apiservice.get("spec") or {}),
                "caBundle": base64.b64encode(pem_bundle(cas)).decode()}
        try:
            written = await self._kube.put(f"{APIREGISTRATION}/apiservices/"
                                           f"{paths.segment(self._apiservice)}",
                                           {**apiservice, "spec": spec})
        except KubeRejected as error:
            if error.status_code == 409:
                return None
            raise Refused(error, on_apiservice=True) from None
        log.info("APIService caBundle updated", extra={
            "apiservice": self._apiservice, "ca_certificates": len(cas)})
        return written

    def _log_change(self, found: Mapping[str, Any] | None, current: Material | None,
                    desired: Material) -> None:
        if current is None or current.ca.cert != desired.ca.cert:
            what = ("created" if found is None else "CA replaced" if current is None else
                    "CA rotated" if current.next_ca is not None
                    and current.next_ca.cert == desired.ca.cert else "CA replaced")
        elif current.next_ca is None and desired.next_ca is not None:
            what = "next CA introduced"
        elif current.serving.cert != desired.serving.cert:
            what = "serving certificate renewed"
        else:
            what = "rotation state updated"
        log.info(f"serving certificate Secret: {what}", extra={
            "secret": self.secret, "serial": format(desired.serving.cert.serial_number, "x"),
            "not_after": desired.serving.cert.not_valid_after_utc.isoformat(),
            "ca": desired.ca.cert.subject.rfc4514_string(),
            "ca_certificates": len(desired.trusted())})

    # start and loop

    async def start(self) -> Material:
        """The first reconcile, before the server listens; raises CertificateBootstrapFailed
        (one line) if kube-apiserver refuses or stays unreachable."""
        backoff = self._backoff or Backoff(initial=1.0, maximum=8.0)
        attempts = 0
        while True:
            try:
                return await self.reconcile()
            except Refused as refused:
                raise CertificateBootstrapFailed(self._refusal(refused)) from None
            except ConflictsPersist as error:
                raise CertificateBootstrapFailed(
                    f"cannot bootstrap the serving certificate: {error}; is another program "
                    "writing them?") from None
            except KubeUnavailable as error:
                attempts += 1
                if attempts == STARTUP_ATTEMPTS:
                    raise CertificateBootstrapFailed(
                        f"cannot bootstrap the serving certificate in secret {self.secret}: "
                        f"kube-apiserver unavailable ({error}); check --kubeconfig and that "
                        "kube-apiserver answers") from None
                log.warning("kube-apiserver unavailable; retrying the serving certificate "
                            "bootstrap", extra={"secret": self.secret, "error": str(error)})
                await asyncio.sleep(backoff.delay())

    def _refusal(self, refused: Refused) -> str:
        error, on_apiservice = refused.error, refused.on_apiservice
        answer = (f"{error.status_code} {error.answer_reason or 'error'}: "
                  f"{error.answer.get('message', '')}")
        if error.status_code == 404 and on_apiservice:
            return (f"APIService {self._apiservice} not found ({answer}): register it "
                    "(apiservice/apiservice.yaml) before the server starts, or pass "
                    "--apiservice-name='' to leave every APIService's caBundle alone")
        if error.status_code in (401, 403) and on_apiservice:
            return (f"cannot keep the caBundle of APIService {self._apiservice} ({answer}): "
                    f"grant the server's identity get, update on apiservices "
                    f"(apiregistration.k8s.io) named {self._apiservice} (ClusterRole "
                    "container-notifier:apiservice-ca-bundle in apiservice/rbac-server.yaml), "
                    "or pass --apiservice-name='' and set the caBundle yourself")
        if error.status_code in (401, 403):
            return (f"cannot bootstrap the serving certificate in secret {self.secret} "
                    f"({answer}): grant the server's identity get, update on secrets named "
                    f"{self._name} and create on secrets in namespace {self._namespace} (Role "
                    "container-notifier:serving-cert in apiservice/rbac-server.yaml), or give "
                    "--tls-cert-file and --tls-private-key-file")
        target = (f"APIService {self._apiservice}" if on_apiservice
                  else f"secret {self.secret}")
        return (f"cannot bootstrap the serving certificate: {target} refused ({answer}): "
                "check --serving-cert-secret, --serving-cert-secret-namespace and "
                "--apiservice-name")

    def _delay(self) -> float:
        if self.material is None:
            return self._retry_seconds
        due = (next_due(self.material, self._policy) - self._clock()).total_seconds()
        return min(max(due, 0.0), self._resync_seconds)

    async def run(self) -> None:
        """Keep everything in sync until cancelled (see the module docstring)."""
        wake = asyncio.Event()
        informers = [Informer(self._kube, self._secrets, name="serving-cert-secret",
                              params={"fieldSelector": f"metadata.name={self._name}"})]
        if self._apiservice:
            informers.append(Informer(
                self._kube, f"{APIREGISTRATION}/apiservices", name="serving-cert-apiservice",
                params={"fieldSelector": f"metadata.name={self._apiservice}"}))
        for informer in informers:
            informer.add_handlers(Handlers(on_add=lambda obj: wake.set(),
                                           on_update=lambda old, new: wake.set(),
                                           on_delete=lambda obj: wake.set()))
        tasks = [asyncio.create_task(informer.run(), name=informer.name)
                 for informer in informers]
        delay = self._delay()
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await wake.wait()
                wake.clear()
                try:
                    await self.reconcile()
                except (Refused, KubeUnavailable, ConflictsPersist) as error:
                    log.warning("serving certificate not reconciled; retrying", extra={
                        "secret": self.secret, "retry_seconds": self._retry_seconds,
                        "error": str(error)})
                    delay = self._retry_seconds
                    continue
                delay = self._delay()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
