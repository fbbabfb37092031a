"""What the serving certificate Secret should hold, given what it holds and the time.

A pure function of the Secret's content, the time and the APIService's published bundle, so
replicas that read the same Secret decide the same thing, and one that lost a write race just
plans again from the winner's Secret. The timeline, in fractions of each certificate's own life
(notBefore to notAfter):

- **serving certificate**: reissued by the current CA at `RENEW_AT` (2/3) of its life, never
  valid past its CA, and at once if it is not the current CA's or its names are not the
  policy's.
- **CA**: at 2/3 of its life a *next* CA is made and added to the bundle (trusted, not signing
  yet). Once the bundle that holds it is seen published (the APIService's caBundle holds it; at
  once when no APIService is managed) it waits the overlap (`OVERLAP_FRACTION` of the CA
  validity), then is *promoted*: it signs a new serving certificate, and the former CA stays in
  the bundle, *retired*, until the last serving certificate it signed expires.
- nothing usable (no Secret, unreadable content, the CA expired): start afresh with a new CA.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding

from certs.authority import DEFAULT_BACKDATE, KeyPair, issue, new_ca

RENEW_AT = 2 / 3
"""The fraction of a certificate's life after which it is replaced (the serving certificate
reissued; for the CA, a next CA introduced)."""
OVERLAP_FRACTION = 1 / 6
"""How long, as a fraction of the CA validity, a next CA is trusted (published) before it signs:
with a one-year CA about two months, time for every client of the bundle to have it."""
BACKDATE_FRACTION = 1 / 10
"""A certificate's notBefore is backdated by this fraction of its validity, at most
DEFAULT_BACKDATE (5 minutes), so a peer with a clock a little behind accepts it at once."""


@dataclass(frozen=True)
class Policy:
    """What the certificates are for and how long they live."""

    service: str
    """The Service the aggregator dials; the certificate's names derive from it."""
    namespace: str
    serving_validity: datetime.timedelta
    ca_validity: datetime.timedelta

    @property
    def dns_names(self) -> tuple[str, ...]:
        """``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc``, ``<svc>.<ns>.svc.cluster.local``."""
        base = f"{self.service}.{self.namespace}"
        return self.service, base, f"{base}.svc", f"{base}.svc.cluster.local"

    @property
    def overlap(self) -> datetime.timedelta:
        return self.ca_validity * OVERLAP_FRACTION


@dataclass(frozen=True)
class Material:
    """The Secret's content: the CA that signs, the serving pair it signed, and the other CAs
    the bundle trusts during a rotation."""

    ca: KeyPair
    serving: KeyPair
    next_ca: KeyPair | None = None
    """A CA made to replace `ca`: in the bundle, not signing yet."""
    next_ca_published_at: datetime.datetime | None = None
    """When the bundle holding `next_ca` was first seen published; None: not yet."""
    retired_ca: x509.Certificate | None = None
    """The CA `ca` replaced, trusted until `retired_ca_until`."""
    retired_ca_until: datetime.datetime | None = None

    def trusted(self) -> tuple[x509.Certificate, ...]:
        """The CA bundle: the current CA, then the next one and the retired one if any."""
        cas = [self.ca.cert]
        if self.next_ca is not None:
            cas.append(self.next_ca.cert)
        if self.retired_ca is not None:
            cas.append(self.retired_ca)
        return tuple(cas)

    def bundle_pem(self) -> bytes:
        return pem_bundle(self.trusted())


def pem_bundle(cas: Sequence[x509.Certificate]) -> bytes:
    """The certificates as one PEM bundle (a Secret's ca-bundle.crt, a caBundle), in order."""
    return b"".join(cert.public_bytes(Encoding.PEM) for cert in cas)


def renewal_time(cert: x509.Certificate) -> datetime.datetime:
    """When `cert` is due for replacement: `RENEW_AT` of the way through its life."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * RENEW_AT


def _backdate(validity: datetime.timedelta) -> datetime.timedelta:
    return min(DEFAULT_BACKDATE, validity * BACKDATE_FRACTION)


def _new_ca(now: datetime.datetime, policy: Policy) -> KeyPair:
    return new_ca(f"{policy.service}-ca@{int(now.timestamp())}", policy.ca_validity, now=now,
                  backdate=_backdate(policy.ca_validity))


def _serving(ca: KeyPair, now: datetime.datetime, policy: Policy) -> KeyPair:
    return issue(ca, policy.dns_names[2], dns_names=policy.dns_names, server=True,
                 validity=policy.serving_validity, now=now,
                 backdate=_backdate(policy.serving_validity), not_after=ca.cert.not_valid_after_utc)


def _names(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(sans.get_values_for_type(x509.DNSName))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def serving_is_current(material: Material, now: datetime.datetime, policy: Policy) -> bool:
    """The serving certificate is the current CA's, has the policy's names and is not due."""
    cert = material.serving.cert
    return (_signed_by(cert, material.ca.cert) and _names(cert) == policy.dns_names
            and now < renewal_time(cert))


def fresh(now: datetime.datetime, policy: Policy) -> Material:
    """A new CA and a serving certificate it signed."""
    ca = _new_ca(now, policy)
    return Material(ca=ca, serving=_serving(ca, now, policy))


def _promoted(material: Material, now: datetime.datetime, policy: Policy) -> Material:
    if material.next_ca is None:
        raise ValueError("no next CA to promote")
    old = material.serving.cert
    return Material(
        ca=material.next_ca, serving=_serving(material.next_ca, now, policy),
        retired_ca=material.ca.cert,
        retired_ca_until=min(material.ca.cert.not_valid_after_utc, old.not_valid_after_utc))


def plan(current: Material | None, now: datetime.datetime, policy: Policy,
         published: Sequence[x509.Certificate] | None = None) -> Material:
    """What the Secret should hold at `now`; `current` itself when nothing is due.

    `current` is None when there is no Secret or its content is unusable. `published` is the
    CA bundle the APIService's caBundle holds now, or None when no APIService is managed (a
    next CA then counts as published once it is in the Secret)."""
    if current is None or now >= current.ca.cert.not_valid_after_utc:
        return fresh(now, policy)
    material = current
    if material.retired_ca_until is not None and now >= material.retired_ca_until:
        material = replace(material, retired_ca=None, retired_ca_until=None)
    if material.next_ca is None and now >= renewal_time(material.ca.cert):
        material = replace(material, next_ca=_new_ca(now, policy), next_ca_published_at=None)
    if material.next_ca is not None:
        if material.next_ca_published_at is None:
            if published is None or material.next_ca.cert in published:
                material = replace(material, next_ca_published_at=now)
        elif now >= material.next_ca_published_at + policy.overlap:
            material = _promoted(material, now, policy)
    if not serving_is_current(material, now, policy):
        material = replace(material, serving=_serving(material.ca, now, policy))
    return material


def next_due(material: Material, policy: Policy) -> datetime.datetime:
    """The earliest time `plan` would change `material` on its own (without a publication)."""
    times = [renewal_time(material.serving.cert), material.ca.cert.not_valid_after_utc]
    if material.next_ca is None:
        times.append(renewal_time(material.ca.cert))
    elif material.next_ca_published_at is not None:
        times.append(material.next_ca_published_at + policy.overlap)
    if material.retired_ca_until is not None:
        times.append(material.retired_ca_until)
    return min(times)
